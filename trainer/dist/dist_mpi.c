/* The Open MPI backend (Debian libopenmpi-dev): non-blocking collectives polled against the
 * deadline. Compiled empty when configure found no MPI. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

#include "priv/dist_internal.h"
#include "util.h"
#include "errors.h"

#if TRN_HAVE_MPI
#include <mpi.h>

static int mpi_fail(struct trn_dist *d, int mrc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(mrc, s, &len);
    return dist_fail(d, -EIO, "MPI %s: %s", what, s);
}

/* Poll the requests until done or the deadline: a yield at first (fast collectives), then short
 * sleeps (a rank waiting for a slow one should not burn a core). */
static int mpi_wait(struct trn_dist *d, int n, MPI_Request *req, double deadline, const char *what,
                    uint64_t seq)
{
    for (long spin = 0;; spin++) {
        int flag = 0;
        const int mrc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, what);
        if (flag) return 0;
        if (dist_now_s() > deadline)
            return dist_fail(
                d, -ETIMEDOUT,
                "MPI %s #%llu did not complete within %g s (a rank is hung, stopped, or "
                "slower than --dist-timeout)",
                what, (unsigned long long)seq, d->timeout_s);
        if (spin < 1000) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 200 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
}

static int mpi_reduce(struct trn_dist *d, void *buf, size_t count, enum dtype dt,
                      enum trn_dist_op op)
{
    const MPI_Datatype t = dt == DT_F32 ? MPI_FLOAT : dt == DT_F64 ? MPI_DOUBLE : MPI_INT64_T;
    const MPI_Op o = op == TRN_DIST_SUM ? MPI_SUM : op == TRN_DIST_MAX ? MPI_MAX : MPI_MIN;
    const size_t esz = dt == DT_F32 ? 4 : 8;
    size_t per = d->bucket_bytes / esz;
    if (per > INT_MAX) per = INT_MAX;
    const uint64_t seq = ++d->seq;
    const double deadline = dist_now_s() + d->timeout_s;
    /* every bucket in flight at once; at most 64 outstanding requests */
    MPI_Request req[64];
    size_t off = 0;
    while (off < count) {
        int k = 0;
        for (; k < 64 && off < count; k++) {
            const size_t n = count - off < per ? count - off : per;
            const int mrc = MPI_Iallreduce(MPI_IN_PLACE, (unsigned char *)buf + off * esz, (int)n,
                                           t, o, MPI_COMM_WORLD, &req[k]);
            if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "all-reduce");
            off += n;
        }
        const int rc = mpi_wait(d, k, req, deadline, "all-reduce", seq);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Host memory only: with MPI every buffer is. */
static int mpi_bcast(struct trn_dist *d, void *buf, size_t bytes, bool device)
{
    (void)device;
    size_t per = d->bucket_bytes > INT_MAX ? INT_MAX : d->bucket_bytes;
    const uint64_t seq = ++d->seq;
    const double deadline = dist_now_s() + d->timeout_s;
    for (size_t off = 0; off < bytes; off += per) {
        const size_t n = bytes - off < per ? bytes - off : per;
        MPI_Request r;
        const int mrc =
            MPI_Ibcast((unsigned char *)buf + off, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "broadcast");
        const int rc = mpi_wait(d, 1, &r, deadline, "broadcast", seq);
        if (rc < 0) return rc;
    }
    return 0;
}

static int mpi_open(struct trn_dist *d, const struct trn_dist_env *env,
                    const struct trn_dist_opts *o)
{
    (void)o;
    int inited = 0, mrc;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* one thread calls MPI at a time: the caller's, then the communication thread's */
        mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (mrc != MPI_SUCCESS) return mpi_fail(d, mrc, "init");
        d->mpi_finalize = true;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    d->thread_ok = level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != env->rank || size != env->world_size)
        return dist_fail(d, -EINVAL,
                         "MPI says rank %d of %d but the launcher's variables say rank %d of %d "
                         "(start the MPI backend with mpirun, or use --dist-backend tcp)",
                         rank, size, env->rank, env->world_size);
    return 0;
}

static void mpi_close(struct trn_dist *d)
{
    if (d->mpi_finalize) MPI_Finalize();
}

static void mpi_abort(struct trn_dist *d, int code)
{
    (void)d;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const struct dist_backend mpi_backend = {
    .open = mpi_open,
    .reduce = mpi_reduce,
    .bcast = mpi_bcast,
    .close = mpi_close,
    .abort = mpi_abort,
};

const struct dist_backend *dist_mpi_backend(void)
{
    return &mpi_backend;
}

#else

const struct dist_backend *dist_mpi_backend(void)
{
    return NULL;
}

#endif
