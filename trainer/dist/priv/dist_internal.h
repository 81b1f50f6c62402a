/*
 * dist's private interface between dist.c (env, TCP star, MPI) and dist_nccl.c (the NCCL
 * backend, compiled only with TRN_HAVE_NCCL). Not for other modules: include dist.h.
 */
#ifndef TRN_DIST_INTERNAL_H
#define TRN_DIST_INTERNAL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES; checked by a static assert in dist_nccl.c). */
#define TRN_DIST_NCCL_ID_BYTES 128

struct trn_dist_nccl;

/* Rank 0: a fresh ncclUniqueId into id (TRN_DIST_NCCL_ID_BYTES, out). Returns 0 or -EIO with a
 * line in err. */
int trn_dist_nccl_unique_id(void *id, char *err, size_t err_cap);

/*
 * Select the device, make a stream and join the NCCL communicator of the id (non-blocking init,
 * polled until timeout_s). out: out. Returns 0, -EIO (a CUDA or NCCL error), -ETIMEDOUT (the
 * init did not complete: the communicator was aborted), -ENOMEM; err: out, one line.
 */
int trn_dist_nccl_create(const void *id, int rank, int world, int device, double timeout_s,
                         struct trn_dist_nccl **out, char *err, size_t err_cap);

/* Sum of device floats in place, in buckets of `bucket` floats, after the work enqueued so far
 * on the producer's `stream` (a cudaStream_t; NULL: after all work on the device), all enqueued
 * on the communicator's stream then polled until done or timeout_s (then the communicator is
 * aborted: -ETIMEDOUT). */
int trn_dist_nccl_allreduce_f32(struct trn_dist_nccl *c, float *dev, size_t n, size_t bucket,
                                void *stream, double timeout_s, char *err, size_t err_cap);

/*
 * The event of gradient bucket `slot` (an index within one backward; events are pooled and reused
 * across backwards), recorded now on the producer's `stream` (cudaStream_t; NULL: the legacy
 * stream), into *event. Called on the thread that produced the gradients. Returns 0, -ENOMEM or
 * -EIO (err: a line).
 */
int trn_dist_nccl_event(struct trn_dist_nccl *c, int slot, void *stream, void **event, char *err,
                        size_t err_cap);

/*
 * A gradient bucket on the communicator's own stream: wait for event (from trn_dist_nccl_event;
 * NULL: none), sum dev[0..n) in place in chunks of `bucket` floats, then copy the sums to host
 * (NULL: none; pinned or not: pageable memory is reached through a pinned staging buffer), all
 * polled until timeout_s. May run on another thread than the one that made the
 * communicator (it selects the device). Returns as trn_dist_nccl_allreduce_f32.
 */
int trn_dist_nccl_grad_bucket(struct trn_dist_nccl *c, void *event, float *dev, float *host,
                              size_t n, size_t bucket, double timeout_s, char *err, size_t err_cap);

/* Rank 0's device bytes to every rank, in place; the same ordering and polling as the
 * all-reduce. */
int trn_dist_nccl_broadcast(struct trn_dist_nccl *c, void *dev, size_t bytes, void *stream,
                            double timeout_s, char *err, size_t err_cap);

/* ncclCommDestroy and free (NULL ok). */
void trn_dist_nccl_destroy(struct trn_dist_nccl *c);

/* ncclCommAbort and free (NULL ok): for faults, never waits for peers. */
void trn_dist_nccl_abort(struct trn_dist_nccl *c);

#ifdef __cplusplus
}
#endif

#endif
