/*
 * dist's private interface between its files: dist.c (the communicator, the communication
 * thread, the gradient buckets), dist_env.c (launcher variables, names), dist_tcp.c (the TCP
 * star), dist_mpi.c (Open MPI) and dist_nccl.c (NCCL, compiled only with TRN_HAVE_NCCL). Not for
 * other modules: include dist.h.
 */
#ifndef TRN_DIST_INTERNAL_H
#define TRN_DIST_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist.h"

#ifndef TRN_HAVE_MPI
#define TRN_HAVE_MPI 0
#endif
#ifndef TRN_HAVE_NCCL
#define TRN_HAVE_NCCL 0
#endif

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

/* ---------------------------------------------------------------------------------------- */
/* The communicator (dist.c), the TCP star (dist_tcp.c), MPI (dist_mpi.c)                   */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the TCP star sends headers in host order; every rank must be little-endian"
#endif

#define WIRE_MAGIC      0x31445946u /* "FYD1" */
#define HELLO_WAIT_S    10.0        /* a connection must say who it is within this */
#define HELLO_HEARTBEAT 1u          /* HELLO's kind for a rank's heartbeat connection */
#define HEARTBEAT_S     1.0         /* a byte each way on it this often */

enum wire_op {
    OP_HELLO = 1,  /* rank -> 0: seq = rank, bytes = world, kind 0 (collectives) or
                      HELLO_HEARTBEAT (the connection that carries heartbeats) */
    OP_WELCOME,    /* 0 -> rank: everyone has joined */
    OP_ALLREDUCE,  /* a bucket of an all-reduce */
    OP_BROADCAST,  /* a bucket of a broadcast */
    OP_EXCHANGE_N, /* trn_dist_tcp_exchange's blob */
};

enum dtype { DT_F32 = 0, DT_F64, DT_I64 };

struct wire_hdr {
    uint32_t magic; /* WIRE_MAGIC */
    uint16_t op;    /* enum wire_op */
    uint16_t kind;  /* dtype << 8 | trn_dist_op (reductions), 0 otherwise */
    uint64_t seq;   /* collective number on this communicator (HELLO: the rank) */
    uint64_t bytes; /* payload bytes that follow (HELLO: the world size) */
};

/* A collective for the communication thread. */
enum job_kind { JOB_REDUCE = 1, JOB_BCAST, JOB_GRAD };

struct job {
    enum job_kind kind;
    void *buf;           /* REDUCE / BCAST: the caller's buffer */
    size_t n;            /* REDUCE, GRAD: elements; BCAST: bytes */
    enum dtype dt;       /* REDUCE */
    enum trn_dist_op op; /* REDUCE */
    bool device;         /* BCAST: device memory (NCCL) */
    float *host;         /* GRAD: the bucket (host memory) */
    float *dev;          /* GRAD, NCCL: the bucket in device memory */
    void *event;         /* GRAD, NCCL: recorded on the producer's stream at launch */
};

struct trn_dist {
    enum trn_dist_backend backend;
    int rank, world, local_rank;
    double timeout_s;
    size_t bucket_bytes;
    int listen_fd;              /* rank 0 of a star: the listening socket until all joined */
    int *fd;                    /* star: rank 0 holds fd[1..world), the others fd[0]; -1 unused */
    int *hb_fd;                 /* star: the heartbeat connection of the same peers */
    pthread_t hb_thread;        /* dist_star_heartbeat: sends and watches the heartbeats */
    bool hb_on;                 /* the thread runs */
    int hb_wake[2];             /* a pipe: closing hb_wake[1] stops the thread */
    double hb_limit_s;          /* a peer silent this long is taken for stopped or hung (0: not
                                   watched; beats are still sent); __atomic: a long barrier
                                   sets it while the heartbeat thread reads it */
    double hb_opt_s;            /* trn_dist_opts.heartbeat_s */
    int hb_silent;              /* the first such peer, or -1 (__atomic: the thread writes it) */
    uint64_t seq;               /* collectives started on this communicator */
    unsigned char *tmp;         /* rank 0's receive bucket */
    size_t tmp_cap;             /* bytes at tmp */
    bool broken;                /* a collective failed: refuse further ones */
    bool mpi_finalize;          /* we called MPI_Init, so we finalize */
    struct trn_dist_nccl *nccl; /* NCCL backend state */
    char err[640];

    /* Communication thread (see the top of the file). Fields below `mu` are guarded by it. */
    bool thread_ok; /* the backend may run on another thread than the creator's */
    bool thread_on; /* started: every collective goes through the queue */
    bool sync_init; /* mu and the condition variables exist */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_job;  /* a job was queued, or quit */
    pthread_cond_t cv_done; /* a job completed */
    struct job *q;          /* ring of q_cap jobs; job k (k counts from 0) at q[k % q_cap] */
    size_t q_cap;
    uint64_t q_head; /* the oldest job not completed (the thread's current one) */
    uint64_t q_tail; /* jobs queued so far */
    bool quit;       /* destroy: the thread ends once the queue is empty */
    int sync_rc;     /* result of the last job the caller waits for */
    int grad_rc;     /* first error of this backward's buckets (0: none) */
    bool waiting;    /* trn_dist_grad_wait has begun for this backward */
    struct trn_dist_grad_stats st;

    /* Bucketing (caller's thread only). */
    bool overlap;              /* opts.overlap */
    size_t first_bucket_bytes; /* opts.first_bucket_bytes, at most bucket_bytes */
    bool in_step;              /* between trn_dist_grad_begin and trn_dist_grad_wait */
    size_t step_len;           /* floats the ranges must cover */
    size_t step_seen;          /* floats reported so far */
    float *b_host, *b_dev;     /* the open bucket's start (the lowest address) */
    void *b_stream;            /* the producer stream of its last range */
    size_t b_n;                /* floats in the open bucket (0: none open) */
    int b_index;               /* buckets launched in this backward */

    void *stream; /* trn_dist_set_stream: the producer of device buffers (NULL: the device) */
    const struct dist_backend *be; /* what the backend does differently (set by create) */
};

/*
 * What differs between the backends, for dist.c's communicator, thread and buckets. Each
 * backend's file defines one; dist_mpi_backend() and dist_nccl_backend() return NULL where the
 * build has no MPI or NCCL (trn_dist_backend_available says so first). NULL members take the
 * generic path: the host reduce for a float32 arena or a gradient bucket, nothing to open,
 * close or abort.
 */
struct dist_backend {
    bool star; /* the TCP star carries the rendezvous (TCP; NCCL's bootstrap) */
    /* join the job, after the star when there is one */
    int (*open)(struct trn_dist *d, const struct trn_dist_env *env, const struct trn_dist_opts *o);
    /* n host elements of dt reduced over the ranks in place (world > 1, op checked) */
    int (*reduce)(struct trn_dist *d, void *buf, size_t n, enum dtype dt, enum trn_dist_op op);
    /* float32 sum of an arena in place (NCCL: device memory) */
    int (*allreduce_f32)(struct trn_dist *d, float *buf, size_t n);
    /* rank 0's bytes to every rank (device: buf is device memory, for backends that take it) */
    int (*bcast)(struct trn_dist *d, void *buf, size_t bytes, bool device);
    /* on the producer's thread at a bucket's launch: what its job must wait for */
    int (*bucket_event)(struct trn_dist *d, struct job *j, int slot);
    /* a gradient bucket's sum (NCCL: device memory, copied to j->host) */
    int (*grad)(struct trn_dist *d, const struct job *j);
    /* orderly shutdown (d->broken: abort instead) */
    void (*close)(struct trn_dist *d);
    /* the process is about to _exit(code) after a fault */
    void (*abort)(struct trn_dist *d, int code);
};

const struct dist_backend *dist_tcp_backend(void);
const struct dist_backend *dist_mpi_backend(void);
const struct dist_backend *dist_nccl_backend(void);

double dist_now_s(void);
int dist_fail(struct trn_dist *d, int rc, const char *fmt, ...);
const char *dist_op_name(int op);
int dist_star_open(struct trn_dist *d, const char *host, int port);
/* Starts the heartbeat thread of an open star (dist.c, once the communicator is made). */
int dist_star_heartbeat(struct trn_dist *d);
void dist_star_close(struct trn_dist *d);
int dist_star_reduce(struct trn_dist *d, void *buf, size_t count, enum dtype dt,
                     enum trn_dist_op op);
int dist_star_bcast(struct trn_dist *d, void *buf, size_t bytes, int op);

#ifdef __cplusplus
}
#endif

#endif
