/*
 * loader: augmented YOLOv5 batches streamed from an ffr detection dataset.
 *
 * The dataset is never loaded into memory: worker threads read the records each sample needs
 * (its own record, the 3 mosaic partners, and 4 more for a mixup), each worker through its own
 * ffio_records engine (io_uring into pinned memory, checked and decoded as they land), build the
 * sample with the trainer/data/augment.h functions, and write it into a ring of `depth` batch
 * buffers in pinned memory (ffio_pinned_alloc), ahead of the consumer.
 *
 * Determinism. What a sample is (its records and every random draw) is a pure function of
 * (seed, epoch, global position) through trainer/core/sampler.h, and each output sample is written
 * by one worker into its own place in the batch, so the batches are the same bytes whatever the
 * number of workers, and a loader started (or moved with trn_loader_set_position) at
 * (epoch, step) yields exactly the batches a loader that got there by iterating yields.
 *
 * Order and ranks. Training: the epoch's shuffle from trn_sampler (keyed Feistel bijection),
 * ranks as DistributedSampler (drop_last=False: the order wraps to give every rank
 * ceil(N / world) samples). Each rank's epoch is ceil(ceil(N / world) / batch) batches; the last
 * one is short when batch does not divide the rank's count (torch's DataLoader with
 * drop_last=False, as ultralytics uses). Validation: dataset order, or with `rect` the order
 * sorted by aspect ratio and ultralytics' rect batch shapes (then world_size must be 1, as
 * ultralytics validates on rank 0 only).
 *
 * Augmentation (training, recipe S5): a mosaic of the sample and 3 partners drawn uniformly from
 * the whole dataset with probability hyp.mosaic (else letterbox), random_perspective, mixup with
 * a second mosaic with probability hyp.mixup, HSV, flips, normalised xywh labels. Validation:
 * letterbox(auto=False, scaleup=False) only. Records hold RGB8 or RGB8-SUB pixels resized as
 * ultralytics' load_image does (yolo-pack --size). Packed for img_size (long side img_size),
 * they are used as stored: ultralytics' bytes. Packed larger, each is shrunk on load to
 * load_image's size for img_size (the pack's int/ceil rounding) with INTER_LINEAR from the
 * stored pixels (one log line says so: load_image starts from the original image, and val.py
 * shrinks with INTER_AREA). Packed smaller: trn_loader_create refuses the dataset.
 *
 * Bad records. A record that fails to read, fails its checksum, does not decode as a detection
 * sample, or disagrees with its index summary is reported once through the log callback with its
 * record number ("record 17 (data.ffr shard 0): checksum mismatch ..."). With
 * TRN_BAD_RECORD_SKIP it is replaced, wherever it is used, by the next good record (index + 1,
 * wrapping), which keeps the batches deterministic; with TRN_BAD_RECORD_FAIL the loader stops
 * and trn_loader_next returns the error. No batch ever holds pixels of a bad record.
 *
 * GPU augmentation (TRAIN with trn_loader_opts.pix_ctx). The workers do everything above but
 * the pixels: they decode the sample's tiles into a per-slot pinned arena (ffio_pinned_alloc:
 * cudaHostAlloc memory when CUDA is usable) and plan the sample on the host (trainer/data/augment.h
 * trn_aug_plan_sample: the labels and targets are exactly the host path's). The worker that
 * completes a batch uploads the slot's tiles into their device twin on pix_ctx's copy queue
 * (kern_mem_copy_on KERN_QUEUE_COPY; each record once per batch, however many mosaics use it)
 * and records an event, so on a GPU the upload overlaps the training step running on the
 * compute queue. trn_loader_next makes the compute queue wait for that event (on the device),
 * enqueues pix_ops->aug_batch into the slot's device image tensor and returns without waiting
 * on the host: the tensor is complete in the order of pix_ctx's compute queue. A slot's pinned
 * arena is rewritten only after its upload event completed, and its device tiles only after
 * the aug_batch that read them (events, kern.h "Queues and events"). device_images equals the host
 * path's images byte for byte (tests/trainer/test_loader_gpu_aug.c on a CPU context; the CUDA
 * twins equal the CPU reference, tests/kernels/test_cuda_parity_augment.c). A sample that has no
 * plan (a record whose long side is not exactly img_size, without mosaic: its letterbox needs a
 * resize) is augmented on the host and uploaded whole (logged once), never dropped. The
 * memory: trn_loader_info's pinned_bytes and device_bytes.
 *
 * Threads. One consumer thread calls trn_loader_next / set_epoch / set_position / info / error;
 * the loader's workers run in the background. The log callback is called from worker threads,
 * one call at a time (the loader serialises them).
 */
#ifndef TRN_LOADER_H
#define TRN_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "det.h"
#include "ffio.h"
#include "ffr.h"
#include "hyp.h"

struct kern_ctx; /* kern.h: the GPU augmentation context (trn_loader_opts.pix_ctx) */
struct kern_ops;

#ifdef __cplusplus
extern "C" {
#endif

/* What the loader produces. */
enum trn_loader_mode {
    TRN_LOADER_TRAIN = 0, /* shuffled, augmented (mosaic, mixup, perspective, HSV, flips) */
    TRN_LOADER_VAL = 1,   /* dataset order (or rect order), letterbox only */
};

/* Element type and layout of the image tensor. */
enum trn_pixel_type {
    TRN_PIXELS_U8 = 0,  /* uint8 0..255, NCHW */
    TRN_PIXELS_F32 = 1, /* float32, value / 255, NCHW */
    /* GPU augmentation only (TRAIN with pix_ctx, not rect, even img_size): bf16 value / 255 in
       the stem's 2x2 space-to-depth, 16 channels (kern_augment.h KERN_AUG_BF16_S2D_*), the
       training input of a bf16 net that takes it (net.h trn_net_s2d_input), so that its step
       casts nothing; trn_batch_pixel reads the pixels back exactly */
    TRN_PIXELS_BF16_S2D_NHWC = 2, /* (n, h/2, w/2, 16) */
    TRN_PIXELS_BF16_S2D_NCHW = 3, /* (n, 16, h/2, w/2) */
};

/* What to do with a bad record (see "Bad records" above). */
enum trn_bad_record {
    TRN_BAD_RECORD_SKIP = 0, /* report once, use the next good record instead */
    TRN_BAD_RECORD_FAIL = 1, /* report, stop; trn_loader_next returns the error */
};

/* One line of the loader's log (bad records, I/O fallbacks); no newline; valid during the call. */
typedef void (*trn_loader_log_fn)(void *ctx, const char *msg);

/* A record of the shard at `path` failed its checksum (its bytes are damaged): called from a
 * worker thread, once per shard, after the record was marked bad. */
typedef void (*trn_loader_damaged_fn)(void *ctx, const char *path, uint64_t record);

/* Loader options; fill with trn_loader_opts_default(), then change fields. */
struct trn_loader_opts {
    enum trn_loader_mode mode;       /* default TRN_LOADER_TRAIN */
    int img_size;                    /* output side s in pixels (records must be packed at long
                                        side s), 32..16383; default 640 */
    int batch_size;                  /* images per batch on this rank, 1..65536; default 16 */
    unsigned workers;                /* worker threads, 0 = min(online cores, 8); max 256 */
    unsigned depth;                  /* batch buffers in the ring, 2..8; default 3 (the consumer
                                        holds one, the workers fill the others) */
    uint64_t seed;                   /* shuffle and augmentation seed; default 0 */
    uint32_t world_size;             /* ranks; default 1 */
    uint32_t rank;                   /* this rank, < world_size; default 0 */
    uint32_t local_world_size;       /* TRAIN on a sharded dataset with world_size > 1: ranks
                                        per node (consecutive ranks share one), for the
                                        shard-aware partition in which each node reads about
                                        n_shards / nodes + 2 shards per epoch (trainer/core/sampler.h,
                                        docs/sharing.md); 0 (default) = world_size, one node */
    uint32_t epoch;                  /* start position: epoch; default 0 */
    uint64_t step;                   /* start position: batch within the epoch; default 0 */
    bool rect;                       /* ultralytics' rect batch shapes (images sorted by aspect
                                        ratio, each batch letterboxed to its shape); needs
                                        world_size 1. VAL: val.py's. TRAIN: train.py --rect:
                                        that order every epoch (no shuffle), no mosaic or mixup,
                                        random_perspective on the batch's shape, the host path
                                        (pix_ctx unused); default false */
    int stride;                      /* rect shapes: model stride; default 32 */
    bool single_cls;                 /* every target's class is 0 (train.py / val.py
                                        --single-cls: the dataset's labels[:, 0] = 0); default
                                        false */
    double rect_pad;                 /* rect shapes: pad; default 0.5 (ultralytics' val; its
                                        training loader uses 0.0) */
    enum trn_pixel_type pixels;      /* default TRN_PIXELS_U8 */
    enum trn_bad_record bad_records; /* default TRN_BAD_RECORD_SKIP */
    struct trn_hyp hyp;              /* augmentation hyperparameters (TRAIN); default
                                        hyp.scratch-low (trn_hyp_default) */
    bool cache_ram;                  /* train.py --cache ram: decoded tiles (after any resize
                                        on load) kept in RAM as they are first read, so later
                                        samples skip the read, the checksum and the decode;
                                        refused with a log line, like train.py, when they would
                                        not fit in 90% of MemAvailable; default false */
    const char *ram_share_key;       /* cache_ram with ram_share_ranks > 1: one copy per node,
                                        in shared memory that the node's ranks fill and read
                                        together (ram_shm.h); the key names this job's
                                        segment (the loader adds the dataset's identity); NULL:
                                        a cache per process, as train.py */
    uint32_t ram_share_ranks;        /* local ranks that attach to it (the node's ranks) */
    bool epoch_gate;                 /* TRAIN: the workers start no sample of an epoch after
                                        the open one (o->epoch at create) until
                                        trn_loader_open_epoch, so that the reader's shards can
                                        be swapped between epochs (a node cache smaller than
                                        the dataset holds one epoch's shards); default false:
                                        epoch after epoch, reading ahead across the boundary */
    bool read_ahead;                 /* each worker claims its next sample and starts reading
                                        its records before it builds the current one, so that
                                        reads overlap augmentation (two samples' read buffers per
                                        worker); the same batches either way; default true */
    struct ffio_records_opts io;     /* each worker's record reader; default
                                        ffio_records_opts_default (verify on: with verify
                                        off, a corrupted record is no longer detected). With
                                        io.io.direct FFIO_DIRECT_AUTO (the default), a dataset
                                        within half of MemAvailable is read through the page
                                        cache, a larger one with O_DIRECT (one log line) */
    const struct det_labels *labels; /* the dataset's label table (det_labels_build), which the
                                        caller keeps alive while the loader lives; NULL (the
                                        default): the loader builds its own */
    trn_loader_log_fn log;           /* optional; NULL drops the lines */
    void *log_ctx;                   /* passed to log */
    trn_loader_damaged_fn damaged;   /* optional: a shard's record failed its checksum (a node
                                        cache evicts that shard: see trn_train_opts.cache) */
    void *damaged_ctx;               /* passed to damaged */
    struct kern_ctx *pix_ctx;        /* TRAIN: when set, GPU augmentation (see "GPU
                                        augmentation" above): the batch tensor is built in this
                                        context's memory by pix_ops->aug_batch and given as
                                        trn_batch.device_images. Borrowed: must outlive the
                                        loader; its ops and compute queue are used only inside
                                        trn_loader_create, _next and _destroy, on the calling
                                        thread; the worker threads use its copy queue and
                                        events (the calls kern.h allows from another thread).
                                        NULL (default), or VAL mode: the host path */
    const struct kern_ops *pix_ops;  /* the table of pix_ctx's backend (kern_ops_ref() for a CPU
                                        context, kern_ops_cuda() for CUDA); checked */
};

/* Fill *o with the defaults documented above. o: out. Thread-safe. */
void trn_loader_opts_default(struct trn_loader_opts *o);

/* Per image of a batch. */
struct trn_batch_image {
    uint64_t index;    /* dataset record of the image (after bad-record replacement) */
    uint64_t position; /* global position in the epoch's order */
    uint32_t h0, w0;   /* original image size (from the index summary) */
    uint32_t h, w;     /* stored size (long side img_size) */
    float ratio_w;     /* VAL: letterbox scale (x), to map predictions back; TRAIN: 0 */
    float ratio_h;     /* VAL: letterbox scale (y); TRAIN: 0 */
    float pad_w;       /* VAL: letterbox left padding dw (pixels, fractional); TRAIN: 0 */
    float pad_h;       /* VAL: letterbox top padding dh; TRAIN: 0 */
};

/*
 * One batch: views into the loader's pinned ring buffer, valid until the next call of
 * trn_loader_next, trn_loader_set_epoch, trn_loader_set_position or trn_loader_destroy.
 */
struct trn_batch {
    uint32_t epoch;             /* epoch of the batch */
    uint64_t step;              /* batch number within the epoch on this rank, < steps */
    uint64_t steps;             /* batches per epoch on this rank */
    int n;                      /* images, <= batch_size (less only for the epoch's last batch) */
    int height, width;          /* image tensor: n images of 3 x height x width (RGB) */
    enum trn_pixel_type pixels; /* element type and layout of images */
    const void *images;         /* n * 3 * height * width elements (U8, F32), pinned memory;
                                   NULL with GPU augmentation (see device_images) */
    size_t image_bytes;         /* bytes at images (or at device_images) */
    const float *targets;       /* [n_targets][6]: image index in the batch, class, cx,
                                   cy, w, h (normalised to width, height); pinned */
    size_t n_targets;           /* rows */
    const struct trn_batch_image *info; /* n entries */
    const void *device_images;          /* TRAIN with trn_loader_opts.pix_ctx: the image tensor (the
                                           layout and type images would have) in pix_ctx's memory,
                                           image_bytes long, written by work that trn_loader_next
                                           enqueued on pix_ctx's compute queue: complete for work
                                           enqueued there after the call (on a CPU context, at
                                           return); another stream or the host must wait first
                                           (kern_cuda_ctx_sync, an event). Valid as the other views;
                                           the loader next writes it depth batches later, in a
                                           trn_loader_next call, after work already enqueued on
                                           that queue. NULL otherwise. */
};

/* Channel ch (0 R, 1 G, 2 B) of pixel (y, x) of image i of a batch whose image tensor (in b's
 * pixel type, b's shape) is at images in host memory, as uint8: the value the augmentation
 * made, in every pixel type (a space-to-depth bf16 holds value / 255 to 8 bits, which round(v
 * 255) gives back). Arguments unchecked. Thread-safe. */
uint8_t trn_batch_pixel(const struct trn_batch *b, const void *images, int i, int ch, int y, int x);

/* Static facts about a loader. */
struct trn_loader_info {
    uint64_t records;          /* records in the dataset */
    uint64_t rank_samples;     /* samples per epoch on this rank: ceil(records / world_size) */
    uint64_t steps;            /* batches per epoch on this rank */
    int max_height, max_width; /* largest batch image size (rect batches vary) */
    unsigned workers;          /* worker threads running */
    unsigned depth;            /* ring buffers */
    size_t pinned_bytes;       /* pinned memory held by the ring (with GPU augmentation, the
                                  tile arenas included) */
    enum ffio_pinned_kind pinned_kind; /* how the ring memory was obtained */
    uint64_t bad_records;              /* distinct bad records found so far */
    uint64_t images;                   /* samples produced so far */
    uint64_t read_ahead;               /* of those, samples whose reads were in flight while
                                          their worker built the sample before */
    size_t device_bytes;   /* pix_ctx memory held (GPU augmentation): per ring buffer the tiles'
                              device twin and the image tensor; 0 without */
    uint64_t uploads;      /* GPU augmentation: batches whose tiles were enqueued on the copy
                              queue so far (by the workers, ahead of trn_loader_next) */
    uint64_t upload_bytes; /* and their bytes (each record once per batch) */
};

struct trn_loader;

/*
 * Create a loader over the open dataset r (borrowed: must outlive the loader) and start its
 * workers, which begin at (o->epoch, o->step). Reads the index summaries (no records) to check
 * the dataset: records are detection samples (metadata encoding ffr-det-1), stored at long side
 * img_size, with valid summaries.
 * o: options (NULL = defaults); copied. out: out, the loader (NULL on error). err: out, err_cap
 * bytes, one line on error (may be NULL).
 * Returns 0, or -EINVAL (bad option, not a detection dataset, images not at img_size, rect with
 * world_size > 1, pix_ops missing or of another backend than pix_ctx), -ENOMEM, -FFR_ECORRUPT
 * (a summary does not parse), the error of kern_mem_alloc on pix_ctx, or the error of a
 * worker's ffio_records_open / ffio_pinned_alloc / thread creation.
 */
int trn_loader_create(const struct ffr_reader *r, const struct trn_loader_opts *o,
                      struct trn_loader **out, char *err, size_t err_cap);

/* Stop the workers, free everything. Views of the last batch become invalid. Accepts NULL. */
void trn_loader_destroy(struct trn_loader *l);

/*
 * The next batch, in order (epoch by epoch without end: the caller decides when to stop).
 * Releases the previous batch's buffer to the workers. Blocks until the batch is ready (with
 * GPU augmentation: its samples built and its upload enqueued on pix_ctx's copy queue), then,
 * with GPU augmentation, enqueues its aug_batch on pix_ctx's compute queue behind the upload and
 * returns without waiting for either.
 * out: out, views valid as struct trn_batch says. Returns 0, or the error that stopped the
 * loader (a bad record with TRN_BAD_RECORD_FAIL: -FFR_ECHECKSUM, -FFR_ECORRUPT, -EIO, ...; an
 * augmentation or I/O engine failure; -ENOTSUP for JPEG records; with GPU augmentation the
 * error of the upload (kern_mem_copy_on, kern_event_*) or of aug_batch, e.g. -EIO, for the
 * batch it belongs to: earlier batches are still delivered); trn_loader_error() has the
 * line. The error stays until trn_loader_set_position.
 */
int trn_loader_next(struct trn_loader *l, struct trn_batch *out);

/*
 * Move to batch `step` of `epoch`: work in flight is finished and discarded, and the next
 * trn_loader_next returns that batch, identical to the one a loader iterating from the start
 * would return. Clears a stopped loader's error. Invalidates the current batch's views.
 * Returns 0 or -EINVAL (step >= steps per epoch).
 */
int trn_loader_set_position(struct trn_loader *l, uint32_t epoch, uint64_t step);

/* trn_loader_set_position(l, epoch, 0). */
int trn_loader_set_epoch(struct trn_loader *l, uint32_t epoch);

/*
 * With epoch_gate: lets the workers go on to `epoch`, after the open one. Call it once the open
 * epoch's last batch was returned: the gate holds the workers, so nothing reads the dataset
 * (the call waits for a straggler, if any), and the caller may swap the reader's shards before
 * it (ffr_reader_swap_shard). Every worker opens its record files again before its next read.
 * Without the call, trn_loader_next returns -EAGAIN for the first batch past the gate rather
 * than wait for ever. trn_loader_set_position opens the epoch it moves to. Returns 0 or -EINVAL
 * (no gate, or epoch not after the open one).
 */
int trn_loader_open_epoch(struct trn_loader *l, uint32_t epoch);

/*
 * Image weights (train.py --image-weights; trainer/core/sampler.h trn_sampler_set_indices): from
 * now on the sample at each position is indices[...] of the shuffle and the mosaic partners are
 * drawn through the table (copied: n values < n; NULL restores the plain order), then as
 * trn_loader_set_position(l, epoch, step). Batches are a pure function of (seed, epoch, position,
 * table). TRAIN mode on an unsharded layout (world_size 1, or one shard) only. Returns 0,
 * -EINVAL (a value >= n, VAL mode, shard-aware sampler, bad step) or -ENOMEM.
 */
int trn_loader_set_indices(struct trn_loader *l, const uint64_t *indices, uint32_t epoch,
                           uint64_t step);

/* Fill *out (counters are a snapshot). out: out. */
void trn_loader_info(struct trn_loader *l, struct trn_loader_info *out);

/* The line describing the error that stopped the loader, or "" (valid until the next call). */
const char *trn_loader_error(struct trn_loader *l);

#ifdef __cplusplus
}
#endif

#endif /* TRN_LOADER_H */
