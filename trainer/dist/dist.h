/*
 * dist: ranks, rendezvous and collectives for data-parallel training (docs/distributed.md).
 *
 * WHO AM I. trn_dist_env_parse reads the launcher's variables from an environment table (pure:
 * tests pass their own tables), in this order:
 *   1. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
 *   2. Slurm (srun): SLURM_PROCID, SLURM_NTASKS (SLURM_STEP_NUM_TASKS when set), SLURM_LOCALID,
 *      the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST / SLURM_NODELIST
 * ("node[03-05,07]" is node03) unless MASTER_ADDR is set, MASTER_PORT or else 20000 + SLURM_JOB_ID
 * % 20000; except that when Open MPI's OMPI_COMM_WORLD_RANK is also set, the process was started by
 *      mpirun (whose daemons Slurm launched), so Open MPI's numbers are the true ones;
 *   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
 *      OMPI_COMM_WORLD_LOCAL_SIZE, and MASTER_ADDR / MASTER_PORT if set;
 *   none of them: one process (rank 0 of 1).
 *
 * BACKENDS. A communicator (struct trn_dist) moves data between the ranks:
 *   TCP   a star over TCP sockets rooted at rank 0, which listens on MASTER_ADDR's host at
 *         MASTER_PORT + 1 (torchrun's own store holds MASTER_PORT). Needs no extra service and no
 *         MPI; rank 0 reduces in rank order, so every rank gets the same bytes and a sum does not
 *         depend on arrival order. Used for the CPU path under torchrun, srun or
 *         yolo-train --nproc-per-node, and as the side channel (bootstrap, flags) of NCCL.
 *   MPI   Open MPI (Debian's libopenmpi) when the process runs under mpirun (or srun with PMIx):
 *         non-blocking collectives polled against a deadline. Built when Open MPI is found at
 *         configure time (not with -Dstatic_deps=true); otherwise asking for it is -ENOTSUP.
 *   NCCL  the GPU path (trainer/dist/dist_nccl.c, built when CUDA and nccl.h + libnccl are found
 * under the CUDA toolkit): the unique id goes from rank 0 to the others over the TCP star,
 *         ncclCommInitRank, float all-reduce and broadcast of DEVICE buffers on a stream polled
 *         against the deadline (ncclCommGetAsyncError, ncclCommAbort on timeout); the small int
 *         collectives and the barrier go over the TCP star.
 *   With world size 1 every backend is the no-op "single" communicator.
 *
 * TIMEOUTS AND FAULTS. Every collective has a deadline of opts.timeout_s seconds from its start.
 * A peer that closed its connection (exited, crashed, was killed) fails the collective at once
 * with -ECONNRESET; a peer that sends nothing before the deadline (hung, stopped, or still busy
 * for longer than the timeout) fails it with -ETIMEDOUT; ranks that call different collectives
 * fail it with -EPROTO. trn_dist_error() names the peer and the collective. After an error the
 * communicator is unusable: the program reports, calls trn_dist_abort() and exits, which closes
 * its sockets, so the other ranks fail their next collective at once rather than at their
 * deadline.
 *
 * ERRORS. int functions return >= 0 on success or a negative errno: -EINVAL (bad arguments or
 * environment), -ENOMEM, -ENOTSUP (a backend not built in), -ETIMEDOUT, -ECONNRESET, -EPROTO,
 * -ECONNREFUSED / -EHOSTUNREACH / -EADDRINUSE (rendezvous), -EIO (an MPI or NCCL call failed).
 * trn_dist_strerror names them; trn_dist_error has the line. The library never prints; only
 * trn_dist_abort ends the process (for programs, style guide rule 15).
 *
 * OVERLAP (trn_dist_grad_*). The gradient all-reduce of a backward is split into buckets that
 * are reduced while the backward goes on, as PyTorch's DistributedDataParallel does: the caller
 * reports each final range of the gradient arena (trainer/model/net.h's gradient-ready hook: one
 * yaml row at a time, last row first); ranges fill a bucket in the order reported until it holds
 * opts.bucket_bytes (DDP's bucket_cap_mb; the first bucket closes at first_bucket_bytes, DDP's
 * 1 MiB first bucket), and a full bucket is launched at once; trn_dist_grad_wait launches the
 * last one and waits for all before the optimizer step. Buckets run on a communication thread
 * that the communicator starts at the first trn_dist_grad_begin (TCP, MPI when Open MPI grants
 * MPI_THREAD_SERIALIZED, NCCL); from then on EVERY collective of the communicator, gradient
 * buckets and blocking calls alike (SyncBatchNorm's sums during the backward, the epoch's flags),
 * runs on that thread in the order the caller issued it. The caller's thread is the only one
 * issuing, and every rank issues the same sequence, so every rank runs the same sequence of
 * collectives: no rank can be in a bucket while another is in a BN sum (which would deadlock or
 * mix buffers). The SUMS do not depend on the buckets: each element is summed over the ranks by
 * the backend in the same order as in one whole-arena all-reduce (TCP: rank order on rank 0;
 * MPI and NCCL with 2 ranks: a + b == b + a), so the result is the same bits with or without
 * overlap and for any bucket size (at more than 2 ranks MPI and NCCL choose their algorithm by
 * message size, so bucket sizes may change the last bits there, as with DDP). Faults: a bucket
 * that fails makes later trn_dist_grad_ready calls and every later collective return the error
 * (the line names the peer), so the backward stops at its next row; a hung peer ends the bucket
 * at its deadline. The caller's waits are bounded too (timeout_s + 60 s of no progress on the
 * communication thread: -ETIMEDOUT). With opts.overlap false, or where the backend cannot run on
 * a second thread, each bucket is reduced on the caller's thread when it fills (the same sums,
 * no overlap).
 *
 * THREADS. A communicator is used by one thread at a time (its communication thread is its
 * own; trn_dist_grad_stats may be called from any thread). The env functions are pure and
 * thread-safe.
 */
#ifndef TRN_DIST_H
#define TRN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the rank numbers came from. */
enum trn_dist_source {
    TRN_DIST_SRC_NONE = 0, /* no launcher variables: a single process */
    TRN_DIST_SRC_TORCHRUN, /* RANK / WORLD_SIZE (torchrun, torch.distributed.launch, ours) */
    TRN_DIST_SRC_SLURM,    /* SLURM_PROCID / SLURM_NTASKS */
    TRN_DIST_SRC_OMPI,     /* OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE */
};

/* What the launcher says about this process. */
struct trn_dist_env {
    enum trn_dist_source source; /* which variables were used */
    int rank;                    /* global rank, 0 <= rank < world_size */
    int world_size;              /* processes in the job, >= 1 */
    int local_rank;              /* rank on this node, 0 <= local_rank < local_world_size */
    int local_world_size;        /* processes on this node (world_size when unknown) */
    char master_addr[256];       /* rank 0's host ("" when the launcher gave none) */
    int master_port;             /* the launcher's MASTER_PORT, 1..65534; 0 when none */
};

/*
 * Read the launcher's variables (see WHO AM I) from env, a NULL-terminated array of "KEY=VALUE"
 * strings (environ). out: out. err: out, one line naming the variable on error (may be NULL).
 * Returns 0, or -EINVAL for a variable that is not a number in range (RANK >= WORLD_SIZE, a
 * negative rank, a port outside 1..65534, an unparsable node list), naming it. Pure.
 */
int trn_dist_env_parse(const char *const *env, struct trn_dist_env *out, char *err, size_t err_cap);

/*
 * The first host of a Slurm node list: "node[03-05,07],gpu1" gives "node03", "a-[1-2]-ib"
 * gives "a-1-ib", "host" gives "host" (each bracket group contributes its first value, zero
 * padding kept). dst: out, dst_cap bytes. Returns the length, -EINVAL (empty list, unbalanced
 * brackets, an empty range) or -ENAMETOOLONG (dst too small). Pure.
 */
int trn_dist_nodelist_first(char *dst, size_t dst_cap, const char *list);

/* A communicator's transport. */
enum trn_dist_backend {
    TRN_DIST_AUTO = 0, /* MPI when started by mpirun (OMPI variables) and built in, else TCP */
    TRN_DIST_SINGLE,   /* world size 1: every collective is a no-op */
    TRN_DIST_TCP,      /* the TCP star (see BACKENDS) */
    TRN_DIST_MPI,      /* Open MPI */
    TRN_DIST_NCCL,     /* NCCL for device buffers + the TCP star for the rest */
};

/* The backend's name ("auto", "single", "tcp", "mpi", "nccl"). */
const char *trn_dist_backend_name(enum trn_dist_backend b);

/* Parse a backend name as above into *out. Returns 0 or -EINVAL. */
int trn_dist_backend_parse(const char *name, enum trn_dist_backend *out);

/* Whether a backend is compiled into this build (SINGLE and TCP always are). */
bool trn_dist_backend_available(enum trn_dist_backend b);

/* Communicator options; fill with trn_dist_opts_default. */
struct trn_dist_opts {
    enum trn_dist_backend backend; /* [TRN_DIST_AUTO] */
    double timeout_s;              /* deadline of each collective and of the rendezvous, seconds,
                                      > 0 [1800, torch.distributed's default] */
    size_t bucket_bytes;           /* all-reduce bucket, bytes, >= 4096 [25 MiB, DDP's
                                      bucket_cap_mb] */
    int port_offset;               /* TCP star port = master_port + port_offset, >= 0 [1] */
    int device;                    /* NCCL: CUDA device ordinal [-1: local_rank] */
    bool overlap;                  /* trn_dist_grad_*: reduce buckets on a communication thread
                                      while the backward goes on [true] */
    size_t first_bucket_bytes;     /* the first gradient bucket of a backward closes here, bytes
                                      (at most bucket_bytes is used) [1 MiB, DDP's first bucket] */
    double heartbeat_s;            /* TCP star (TCP, NCCL's bootstrap): a rank heard from by no
                                      heartbeat this long (a thread sends one each second,
                                      whatever the rank computes) is stopped, hung or cut off,
                                      and the collectives waiting on it fail naming it; not used
                                      when timeout_s is as short, whose deadline then ends such
                                      waits itself; 0: never [30] */
};

/* Fill o with the defaults in brackets. */
void trn_dist_opts_default(struct trn_dist_opts *o);

struct trn_dist;

/*
 * Join the job described by env (borrowed for the call): with world_size 1 a SINGLE
 * communicator; otherwise the backend of o (NULL: defaults) is started and every rank is
 * connected before this returns (a rendezvous: rank 0 waits for all, the others retry their
 * connection until rank 0 listens, all within timeout_s). out: out, the communicator (free
 * with trn_dist_destroy). err: out, one line on failure (may be NULL).
 * Returns 0, -EINVAL (bad options; TCP/NCCL without MASTER_ADDR / MASTER_PORT; MPI whose world
 * disagrees with env), -ENOTSUP (MPI or NCCL asked for but not built; world > 1 with AUTO and
 * neither TCP variables nor MPI), -ETIMEDOUT (not every rank arrived), -EADDRINUSE (rank 0's
 * port is taken), -ECONNREFUSED, -EPROTO (a stranger or a rank of another job connected),
 * -ENOMEM, -EIO.
 */
int trn_dist_create(const struct trn_dist_env *env, const struct trn_dist_opts *o,
                    struct trn_dist **out, char *err, size_t err_cap);

/* Leave the job and free d (MPI_Finalize / ncclCommDestroy as needed). NULL is a no-op. After an
 * error in a collective, call trn_dist_abort instead (a finalize could wait for dead peers). */
void trn_dist_destroy(struct trn_dist *d);

/*
 * End this process after a fault: MPI_Abort (which makes mpirun end every rank), ncclCommAbort,
 * or _exit for TCP (the peers see the connection close). code: the exit status. Does not
 * return. For programs only; d may be NULL (then plain _exit).
 */
_Noreturn void trn_dist_abort(struct trn_dist *d, int code);

/* This process's rank, world size, local rank, and backend (SINGLE for world 1). */
int trn_dist_rank(const struct trn_dist *d);
int trn_dist_world(const struct trn_dist *d);
int trn_dist_local_rank(const struct trn_dist *d);
enum trn_dist_backend trn_dist_backend(const struct trn_dist *d);

/*
 * Sum buf[0..n) over all ranks, in place, in buckets of opts.bucket_bytes; every rank gets the
 * same bytes. Host memory for SINGLE, TCP and MPI; DEVICE memory for NCCL. Returns 0 or a
 * collective error (see TIMEOUTS AND FAULTS).
 */
int trn_dist_allreduce_f32(struct trn_dist *d, float *buf, size_t n);

/* Sum of host doubles (small buffers: statistics), every backend (NCCL: over TCP). */
int trn_dist_allreduce_f64(struct trn_dist *d, double *buf, size_t n);

/* Reductions of small host int64 buffers (flags, counters, checksums). */
enum trn_dist_op {
    TRN_DIST_SUM = 0,
    TRN_DIST_MAX,
    TRN_DIST_MIN,
};
int trn_dist_allreduce_i64(struct trn_dist *d, int64_t *buf, size_t n, enum trn_dist_op op);

/*
 * Copy rank 0's bytes[0..bytes) to every rank, in place. Host memory (NCCL: device memory
 * when device is true, host memory over TCP otherwise; other backends ignore device).
 */
int trn_dist_broadcast(struct trn_dist *d, void *buf, size_t bytes, bool device);

/*
 * The stream (a cudaStream_t) whose work writes the device buffers later given to
 * trn_dist_allreduce_f32 and trn_dist_broadcast(device): NCCL's collectives are ordered after the
 * work enqueued on it so far, without blocking the host. Unset (NULL), they wait for all work on
 * the device. Other backends ignore it. Set it before the first collective; d may be NULL.
 */
void trn_dist_set_stream(struct trn_dist *d, void *stream);

/* Wait until every rank has called it (or the deadline). */
int trn_dist_barrier(struct trn_dist *d);

/*
 * trn_dist_barrier with its own deadline, timeout_s, when that is longer than the
 * communicator's: for waits whose length is the work of the slowest rank rather than the
 * network's, such as filling node caches from an origin before training. A rank that exits,
 * stops or hangs is still found within trn_dist_opts.heartbeat_s on the TCP star, also when
 * that limit is not used for the communicator's own deadline. Returns as trn_dist_barrier.
 */
int trn_dist_barrier_for(struct trn_dist *d, double timeout_s);

/*
 * Overlapped gradient all-reduce (see OVERLAP). One backward: trn_dist_grad_begin(d, len) with
 * the arena's length in floats; trn_dist_grad_ready for each final range, in the order they
 * become final (a range adjacent to the open bucket's extends it; any other closes it first);
 * trn_dist_grad_wait before the gradients are read. Every range is summed over the ranks in
 * place (host memory; NCCL: dev, device memory, after the work on `stream` so far (a
 * cudaStream_t, NULL for the legacy stream), and the sums are then copied into host). The ranges
 * must cover len floats in all. Between ready and the end of wait the caller must not touch a
 * reported range. With world size 1 all three are no-ops.
 * begin returns 0 or -EINVAL (a step already open, len 0); ready returns 0, -EINVAL (no open
 * step, more than len floats, NCCL without dev), -ENOMEM, or the error of a bucket that already
 * failed (then stop the backward and call wait); wait returns 0, -EINVAL (the ranges did not
 * cover len), or the first bucket's collective error (trn_dist_error names the peer). wait
 * always drains: after it returns no bucket is in flight.
 */
int trn_dist_grad_begin(struct trn_dist *d, size_t len);
int trn_dist_grad_ready(struct trn_dist *d, float *host, float *dev, void *stream, size_t count);
int trn_dist_grad_wait(struct trn_dist *d);

/* Whether trn_dist_grad_* overlaps buckets with the caller (opts.overlap, world > 1, and a
 * backend that can run on the communication thread). */
bool trn_dist_overlap(const struct trn_dist *d);

/* Counters of the current (or last) backward's buckets, for tests and logs; not timings. */
struct trn_dist_grad_stats {
    uint64_t steps;           /* backwards completed (trn_dist_grad_wait calls) */
    uint64_t ranges;          /* trn_dist_grad_ready calls of this backward */
    uint64_t buckets;         /* buckets launched in this backward */
    uint64_t first_launch_at; /* ranges reported when the first bucket was launched (0: none) */
    uint64_t started;         /* buckets the communication thread has started */
    uint64_t done;            /* buckets completed (successfully or not) */
    uint64_t done_early;      /* buckets completed before trn_dist_grad_wait was called */
    size_t last_bucket_bytes; /* bytes of the last bucket launched */
};

/* Copy the counters into *out (thread-safe). Returns 0 or -EINVAL. */
int trn_dist_grad_stats(struct trn_dist *d, struct trn_dist_grad_stats *out);

/* The line describing the last error ("" when none); valid until the next call on d. */
const char *trn_dist_error(const struct trn_dist *d);

/* A static name for any code returned above. */
const char *trn_dist_strerror(int rc);

/* One line of a launcher's report (no newline), valid during the call. */
typedef void (*trn_dist_log_fn)(void *ctx, const char *line);

/*
 * torchrun --nproc-per-node on one host: start nproc copies of this program (/proc/self/exe with
 * argv, NULL-terminated, which must not carry the launcher's own option), each with torchrun's
 * variables (RANK = LOCAL_RANK = r, WORLD_SIZE = LOCAL_WORLD_SIZE = nproc, MASTER_ADDR
 * 127.0.0.1, MASTER_PORT: $MASTER_PORT or a free pair of ports) in its own process group (so a
 * terminal's Ctrl-C reaches only this parent, which forwards it once) and ended by SIGTERM if this
 * process dies. SIGINT, SIGTERM and SIGUSR1 are forwarded; when a rank fails the others get
 * grace_s to end (they notice the closed connection at once; only a hung or stopped rank stays),
 * then SIGKILL. log (NULL: none) gets a line per rank started and per rank killed by a signal, and
 * the reason of a setup failure. Returns the exit status: 0 when every rank exits 0, else the
 * first failure's (a rank killed by signal s: 128 + s); 1 when the ranks cannot be started.
 */
int trn_dist_launch_local(int nproc, char *const *argv, double grace_s, trn_dist_log_fn log,
                          void *log_ctx);

/*
 * The rendezvous alone, as the NCCL bootstrap uses it: rank 0 sends blob[0..len) to every rank
 * over a TCP star on host:port (rank 0 listens on port; the others connect to host:port), then
 * the star is closed. Every rank passes the same len; the others receive into blob. Returns 0
 * or a create / collective error; err: out, one line. Exposed for tests and for launchers.
 */
int trn_dist_tcp_exchange(const char *host, int port, int rank, int world, void *blob, size_t len,
                          double timeout_s, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_DIST_H */
