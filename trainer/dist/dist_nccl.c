/*
 * dist's NCCL backend (dist_internal.h): a non-blocking NCCL communicator whose every operation
 * is polled against a deadline, so a dead or hung rank ends in ncclCommAbort and an error line
 * instead of a hang (NCCL's "async error handling": blocking = 0 in ncclConfig_t, completion by
 * cudaStreamQuery, faults by ncclCommGetAsyncError). The unique id comes from dist.c, which
 * sends it from rank 0 over the TCP star.
 *
 * Every operation is ordered after the work that produced its device buffer without blocking
 * the host: the producer's stream records an event that the communicator's stream waits for
 * (a NULL producer stream means "any work on the device", a device-wide synchronisation). And
 * nothing that can wait for a peer blocks the host outside the polled deadline: sums go to host
 * memory only through page-locked memory (the caller's when it is pinned, else a pinned staging
 * buffer of ours copied out after the poll), since a cudaMemcpyAsync into pageable memory waits,
 * unbounded, for the all-reduce ahead of it on the stream.
 *
 * Plain C against the CUDA runtime's and NCCL's C APIs (no kernels of our own). Compiled only
 * when configure finds CUDA with nccl.h and libnccl (TRN_HAVE_NCCL).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "priv/dist_internal.h"

_Static_assert(NCCL_UNIQUE_ID_BYTES == TRN_DIST_NCCL_ID_BYTES, "ncclUniqueId size");

struct trn_dist_nccl {
    ncclComm_t comm;
    cudaStream_t stream; /* the communicator's own: collectives and gradient buckets */
    int device;
    cudaEvent_t *ev;      /* gradient buckets' producer events, by slot (created on demand) */
    int n_ev;             /* events at ev */
    cudaEvent_t produced; /* the producer stream's work so far, for whole-buffer collectives */
    float *stage;         /* pinned staging for sums copied to pageable host memory */
    size_t stage_n;       /* floats at stage */
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_briefly(long spin)
{
    if (spin < 1000) {
        sched_yield();
    } else {
        struct timespec ts = { 0, 100 * 1000 };
        nanosleep(&ts, NULL);
    }
}

int trn_dist_nccl_unique_id(void *id, char *err, size_t err_cap)
{
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        snprintf(err, err_cap, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        return -EIO;
    }
    memcpy(id, &u, sizeof u);
    return 0;
}

/* Wait until the communicator has no operation in progress (init, or enqueued collectives). */
static int wait_comm(struct trn_dist_nccl *c, double deadline, const char *what, char *err,
                     size_t err_cap)
{
    for (long spin = 0;; spin++) {
        ncclResult_t a = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(c->comm, &a);
        if (r != ncclSuccess || (a != ncclSuccess && a != ncclInProgress)) {
            snprintf(err, err_cap, "NCCL %s failed: %s (a peer died or the network failed)", what,
                     ncclGetErrorString(r != ncclSuccess ? r : a));
            return -EIO;
        }
        if (a == ncclSuccess) return 0;
        if (now_s() > deadline) {
            snprintf(err, err_cap, "NCCL %s did not complete before the deadline", what);
            return -ETIMEDOUT;
        }
        pause_briefly(spin);
    }
}

/* Wait for the stream's work (the enqueued collectives), checking NCCL's async errors. */
static int wait_stream(struct trn_dist_nccl *c, double deadline, const char *what, char *err,
                       size_t err_cap)
{
    for (long spin = 0;; spin++) {
        const cudaError_t q = cudaStreamQuery(c->stream);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady) {
            snprintf(err, err_cap, "NCCL %s: CUDA: %s", what, cudaGetErrorString(q));
            return -EIO;
        }
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(c->comm, &a);
        if (a != ncclSuccess && a != ncclInProgress) {
            snprintf(err, err_cap, "NCCL %s failed: %s (a peer died or the network failed)", what,
                     ncclGetErrorString(a));
            return -EIO;
        }
        if (now_s() > deadline) {
            snprintf(err, err_cap,
                     "NCCL %s did not complete before the deadline (a rank is hung or slower "
                     "than --dist-timeout)",
                     what);
            return -ETIMEDOUT;
        }
        pause_briefly(spin);
    }
}

int trn_dist_nccl_create(const void *id, int rank, int world, int device, double timeout_s,
                         struct trn_dist_nccl **out, char *err, size_t err_cap)
{
    struct trn_dist_nccl *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->device = device;
    cudaError_t ce = cudaSetDevice(device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->produced, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        snprintf(err, err_cap, "CUDA device %d: %s", device, cudaGetErrorString(ce));
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
        return -EIO;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* every call returns at once; we poll against our deadline */
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, world, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, err_cap, "ncclCommInitRankConfig (rank %d of %d): %s", rank, world,
                 ncclGetErrorString(r));
        c->comm = NULL;
        trn_dist_nccl_abort(c);
        return -EIO;
    }
    const int rc = wait_comm(c, now_s() + timeout_s, "init", err, err_cap);
    if (rc < 0) {
        trn_dist_nccl_abort(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Order the communicator's stream after the producer's work so far (see the contract above). */
static int after_producer(struct trn_dist_nccl *c, void *stream, const char *what, char *err,
                          size_t err_cap)
{
    cudaError_t ce = cudaSetDevice(c->device);
    if (ce == cudaSuccess && !stream) ce = cudaDeviceSynchronize();
    if (ce == cudaSuccess && stream) ce = cudaEventRecord(c->produced, (cudaStream_t)stream);
    if (ce == cudaSuccess && stream) ce = cudaStreamWaitEvent(c->stream, c->produced, 0);
    if (ce != cudaSuccess) {
        snprintf(err, err_cap, "NCCL %s: ordering after the producer: %s", what,
                 cudaGetErrorString(ce));
        return -EIO;
    }
    return 0;
}

/* Sum dev[0 .. n) over the ranks in place, bucket floats per collective, each enqueued within
 * the deadline (what names the wait in an error). */
static int sum_buckets(struct trn_dist_nccl *c, float *dev, size_t n, size_t bucket,
                       double deadline, const char *what, char *err, size_t err_cap)
{
    for (size_t off = 0; off < n; off += bucket) {
        const size_t k = n - off < bucket ? n - off : bucket;
        const ncclResult_t r =
            ncclAllReduce(dev + off, dev + off, k, ncclFloat32, ncclSum, c->comm, c->stream);
        if (r != ncclSuccess && r != ncclInProgress) {
            snprintf(err, err_cap, "ncclAllReduce: %s", ncclGetErrorString(r));
            return -EIO;
        }
        const int rc = wait_comm(c, deadline, what, err, err_cap);
        if (rc < 0) return rc;
    }
    return 0;
}

int trn_dist_nccl_allreduce_f32(struct trn_dist_nccl *c, float *dev, size_t n, size_t bucket,
                                void *stream, double timeout_s, char *err, size_t err_cap)
{
    if (!c || bucket == 0) return -EINVAL;
    const double deadline = now_s() + timeout_s;
    const int prc = after_producer(c, stream, "all-reduce", err, err_cap);
    if (prc < 0) return prc;
    const int rc = sum_buckets(c, dev, n, bucket, deadline, "all-reduce enqueue", err, err_cap);
    if (rc < 0) return rc;
    return wait_stream(c, deadline, "all-reduce", err, err_cap);
}

int trn_dist_nccl_event(struct trn_dist_nccl *c, int slot, void *stream, void **event, char *err,
                        size_t err_cap)
{
    if (!c || slot < 0 || !event) return -EINVAL;
    if (slot >= c->n_ev) {
        /* grows only while backwards launch more buckets than before: steady state allocates
         * nothing */
        const int n = slot + 8;
        cudaEvent_t *e = realloc(c->ev, (size_t)n * sizeof *e);
        if (!e) return -ENOMEM;
        c->ev = e;
        for (; c->n_ev < n; c->n_ev++) {
            const cudaError_t ce =
                cudaEventCreateWithFlags(&c->ev[c->n_ev], cudaEventDisableTiming);
            if (ce != cudaSuccess) {
                snprintf(err, err_cap, "cudaEventCreate: %s", cudaGetErrorString(ce));
                return -EIO;
            }
        }
    }
    const cudaError_t ce = cudaEventRecord(c->ev[slot], (cudaStream_t)stream);
    if (ce != cudaSuccess) {
        snprintf(err, err_cap, "cudaEventRecord: %s", cudaGetErrorString(ce));
        return -EIO;
    }
    *event = (void *)c->ev[slot];
    return 0;
}

/* host itself when CUDA knows it as page-locked, else our staging buffer grown to n floats
 * (NULL: no memory, err set). Buckets run one at a time on the communication thread. */
static float *pinned_or_stage(struct trn_dist_nccl *c, float *host, size_t n, char *err,
                              size_t err_cap)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) == cudaSuccess && a.type == cudaMemoryTypeHost)
        return host;
    (void)cudaGetLastError(); /* an unknown pointer is an answer, not a sticky error */
    if (c->stage_n < n) {
        if (c->stage) cudaFreeHost(c->stage);
        c->stage = NULL;
        c->stage_n = 0;
        if (cudaMallocHost((void **)&c->stage, n * sizeof(float)) != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(err, err_cap, "NCCL gradient bucket: no pinned memory for %zu floats", n);
            return NULL;
        }
        c->stage_n = n;
    }
    return c->stage;
}

int trn_dist_nccl_grad_bucket(struct trn_dist_nccl *c, void *event, float *dev, float *host,
                              size_t n, size_t bucket, double timeout_s, char *err, size_t err_cap)
{
    if (!c || !dev || bucket == 0) return -EINVAL;
    const double deadline = now_s() + timeout_s;
    /* the communication thread: the device is per thread */
    cudaError_t ce = cudaSetDevice(c->device);
    /* ordered after the backward's writes to dev without blocking the producer's stream */
    if (ce == cudaSuccess && event) ce = cudaStreamWaitEvent(c->stream, (cudaEvent_t)event, 0);
    if (ce != cudaSuccess) {
        snprintf(err, err_cap, "NCCL gradient bucket: CUDA: %s", cudaGetErrorString(ce));
        return -EIO;
    }
    const int brc =
        sum_buckets(c, dev, n, bucket, deadline, "gradient bucket enqueue", err, err_cap);
    if (brc < 0) return brc;
    float *dst = NULL;
    if (host) {
        /* enqueued behind the all-reduce into page-locked memory, where the copy is truly
         * asynchronous: a hung peer shows as a timeout in wait_stream, never as a copy blocking
         * for ever */
        dst = pinned_or_stage(c, host, n, err, err_cap);
        if (!dst) return -ENOMEM;
        ce = cudaMemcpyAsync(dst, dev, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream);
        if (ce != cudaSuccess) {
            snprintf(err, err_cap, "NCCL gradient bucket copy: %s", cudaGetErrorString(ce));
            return -EIO;
        }
    }
    const int rc = wait_stream(c, deadline, "gradient bucket", err, err_cap);
    if (rc == 0 && dst && dst != host) memcpy(host, dst, n * sizeof(float));
    return rc;
}

int trn_dist_nccl_broadcast(struct trn_dist_nccl *c, void *dev, size_t bytes, void *stream,
                            double timeout_s, char *err, size_t err_cap)
{
    if (!c) return -EINVAL;
    const double deadline = now_s() + timeout_s;
    const int prc = after_producer(c, stream, "broadcast", err, err_cap);
    if (prc < 0) return prc;
    const ncclResult_t r = ncclBroadcast(dev, dev, bytes, ncclUint8, 0, c->comm, c->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, err_cap, "ncclBroadcast: %s", ncclGetErrorString(r));
        return -EIO;
    }
    const int rc = wait_comm(c, deadline, "broadcast enqueue", err, err_cap);
    return rc < 0 ? rc : wait_stream(c, deadline, "broadcast", err, err_cap);
}

/* Everything but the communicator. */
static void release(struct trn_dist_nccl *c)
{
    for (int k = 0; k < c->n_ev; k++)
        cudaEventDestroy(c->ev[k]);
    free(c->ev);
    if (c->produced) cudaEventDestroy(c->produced);
    if (c->stage) cudaFreeHost(c->stage);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

void trn_dist_nccl_destroy(struct trn_dist_nccl *c)
{
    if (!c) return;
    if (c->comm) {
        /* non-blocking: finalize completes asynchronously; a peer that is gone leaves it in
         * progress, then abort rather than wait for ever */
        char e[256];
        const ncclResult_t r = ncclCommFinalize(c->comm);
        if ((r != ncclSuccess && r != ncclInProgress) ||
            wait_comm(c, now_s() + 60, "finalize", e, sizeof e) < 0)
            ncclCommAbort(c->comm);
        else
            ncclCommDestroy(c->comm);
    }
    release(c);
}

void trn_dist_nccl_abort(struct trn_dist_nccl *c)
{
    if (!c) return;
    if (c->comm) ncclCommAbort(c->comm);
    release(c);
}

/* ---------------------------------------------------------------------------------------- */
/* The backend: float32 arenas, buckets and device broadcasts over NCCL; the rest (host
   reductions, the id exchange) over the TCP star. */

static int nccl_open(struct trn_dist *d, const struct trn_dist_env *env,
                     const struct trn_dist_opts *o)
{
    unsigned char id[TRN_DIST_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    char e[512] = "";
    int rc = 0;
    if (d->rank == 0 && (rc = trn_dist_nccl_unique_id(id, e, sizeof e)) < 0)
        return dist_fail(d, rc, "%s", e);
    if (d->world > 1 && (rc = dist_star_bcast(d, id, sizeof id, OP_BROADCAST)) < 0) return rc;
    const int dev = o->device >= 0 ? o->device : env->local_rank;
    if ((rc = trn_dist_nccl_create(id, d->rank, d->world, dev, d->timeout_s, &d->nccl, e,
                                   sizeof e)) < 0)
        return dist_fail(d, rc, "%s", e);
    return 0;
}

static int nccl_allreduce_f32(struct trn_dist *d, float *buf, size_t n)
{
    char e[512] = "";
    const int r = trn_dist_nccl_allreduce_f32(d->nccl, buf, n, d->bucket_bytes / 4, d->stream,
                                              d->timeout_s, e, sizeof e);
    return r < 0 ? dist_fail(d, r, "%s", e) : 0;
}

static int nccl_bcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    if (!device) return dist_star_bcast(d, buf, bytes, OP_BROADCAST);
    char e[512] = "";
    const int r =
        trn_dist_nccl_broadcast(d->nccl, buf, bytes, d->stream, d->timeout_s, e, sizeof e);
    return r < 0 ? dist_fail(d, r, "%s", e) : 0;
}

static int nccl_bucket_event(struct trn_dist *d, struct job *j, int slot)
{
    char e[512] = "";
    const int rc = trn_dist_nccl_event(d->nccl, slot, d->b_stream, &j->event, e, sizeof e);
    return rc < 0 ? dist_fail(d, rc, "gradient bucket %d: %s", slot, e) : 0;
}

static int nccl_grad(struct trn_dist *d, const struct job *j)
{
    char e[512] = "";
    const int r = trn_dist_nccl_grad_bucket(d->nccl, j->event, j->dev, j->host, j->n,
                                            d->bucket_bytes / 4, d->timeout_s, e, sizeof e);
    return r < 0 ? dist_fail(d, r, "gradient bucket: %s", e) : 0;
}

static void nccl_close(struct trn_dist *d)
{
    if (d->broken)
        trn_dist_nccl_abort(d->nccl);
    else
        trn_dist_nccl_destroy(d->nccl);
    d->nccl = NULL;
}

static void nccl_abort(struct trn_dist *d, int code)
{
    (void)code;
    trn_dist_nccl_abort(d->nccl);
    d->nccl = NULL;
}

static const struct dist_backend nccl_backend = {
    .star = true,
    .open = nccl_open,
    .reduce = dist_star_reduce,
    .allreduce_f32 = nccl_allreduce_f32,
    .bcast = nccl_bcast,
    .bucket_event = nccl_bucket_event,
    .grad = nccl_grad,
    .close = nccl_close,
    .abort = nccl_abort,
};

const struct dist_backend *dist_nccl_backend(void)
{
    return &nccl_backend;
}
