/* The dist part of a run (priv/run.h): the ranks' batch split, the hooks the nets call during
 * a step (SyncBatchNorm, the overlapped gradient all-reduce), and what the ranks agree on at the
 * start, at epoch ends and at a stop. */
#include "priv/run.h"

/* train.py: batch_size // WORLD_SIZE per rank, which must divide exactly here (a rounded batch
 * would make the global batch, and so the optimizer's settings, depend on the world). */
int run_dist_setup(struct run *R, char *err, size_t cap)
{
    if (R->o.batch_size % R->dist.world != 0) {
        trn_seterr(err, cap,
                   "--batch-size %d is the global batch and must be divisible by the world size %d "
                   "(%d ranks)",
                   R->o.batch_size, R->dist.world, R->dist.world);
        return -EINVAL;
    }
    R->dist.local_bs = R->o.batch_size / R->dist.world;
    if (R->dist.world > 1 && !R->dist.comm) return -EINVAL;
    R->dist.overlap = R->dist.world > 1 && trn_dist_overlap(R->dist.comm);
    return 0;
}

/* SyncBatchNorm (opts.sync_bn): a BN layer's sums from the net, summed over the ranks. */
int run_dist_bn_allreduce(void *ctx, double *buf, size_t n)
{
    struct run *const R = ctx;
    const int rc = trn_dist_allreduce_f64(R->dist.comm, buf, n);
    if (rc < 0) R->dist.bn_sync_failed = true;
    return rc;
}

/* Overlapped gradient all-reduce: a row's gradients are final, so its bucket may fill and go. */
int run_dist_grad_ready(void *ctx, const struct trn_net_grad_range *g)
{
    struct run *const R = ctx;
    const int rc = trn_dist_grad_ready(R->dist.comm, g->host, g->dev, g->stream, g->count);
    if (rc < 0) R->dist.grad_sync_failed = true;
    return rc;
}

/* A digest of the parameters' bytes: at epoch ends the ranks check they still hold the same. */
static int64_t params_digest(const struct run *R)
{
    const uint32_t *w = (const uint32_t *)trn_model_arena(R->nets.m, TRN_ARENA_PARAM);
    const size_t n = R->nets.info->arena_len[TRN_ARENA_PARAM];
    uint64_t h = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ w[i]) * 0x100000001b3u;
        h ^= h >> 29;
    }
    return (int64_t)(h >> 1); /* non-negative: -h cannot overflow */
}

/* Start equal: rank 0's parameters, buffers and counters go to every rank (as DDP's constructor
 * broadcasts the module state). */
int run_dist_start(struct run *R, char *err, size_t cap)
{
    const struct trn_model_info *I = R->nets.info;
    static const int arena[3] = { TRN_ARENA_PARAM, TRN_ARENA_BUFFER, TRN_ARENA_COUNT };
    for (int k = 0; k < 3; k++) {
        const size_t esz = arena[k] == TRN_ARENA_COUNT ? sizeof(int64_t) : sizeof(float);
        const int rc = trn_dist_broadcast(R->dist.comm, trn_model_arena(R->nets.m, arena[k]),
                                          I->arena_len[arena[k]] * esz, false);
        if (rc < 0) {
            trn_seterr(err, cap, "broadcasting rank 0's weights: %s", trn_dist_error(R->dist.comm));
            return rc;
        }
    }
    return 0;
}

/* An epoch's end on every rank: rank 0's status (it validated and saved) and early-stop
 * decision reach the others, and the ranks compare their weight digests. rc0: this rank's
 * status so far. Returns rc0 when it failed, else 0 or the error every rank then stops with. */
int run_dist_epoch_sync(struct run *R, int epoch, int rc0, bool *early, char *err, size_t cap)
{
    const int64_t h = params_digest(R);
    int64_t v[4] = { rc0 < 0 ? rc0 : 0, R->dist.rank == 0 && *early ? -1 : 0, h, -h };
    const int rc = trn_dist_allreduce_i64(R->dist.comm, v, 4, TRN_DIST_MIN);
    if (rc < 0) {
        if (rc0 < 0) return rc0;
        trn_seterr(err, cap, "end of epoch %d: %s", epoch, trn_dist_error(R->dist.comm));
        return rc;
    }
    if (rc0 < 0) return rc0;
    if (v[0] < 0) {
        trn_seterr(err, cap, "another rank failed at the end of epoch %d (rank 0's log says why)",
                   epoch);
        return -ECANCELED;
    }
    if (v[2] != -v[3]) {
        trn_seterr(err, cap,
                   "the ranks' weights differ after epoch %d (digest %" PRId64 " here, %" PRId64
                   " .. %" PRId64 " over the ranks)",
                   epoch, h, v[2], -v[3]);
        return -EPROTO;
    }
    *early = v[1] < 0;
    return 0;
}

/* Every rank's stop request (the largest signal number) after a batch; 0: go on. */
int run_dist_stop_vote(struct run *R, int64_t *sig, char *err, size_t cap)
{
    if (R->dist.world == 1) return 0;
    const int rc = trn_dist_allreduce_i64(R->dist.comm, sig, 1, TRN_DIST_MAX);
    if (rc < 0) trn_seterr(err, cap, "agreeing on a stop: %s", trn_dist_error(R->dist.comm));
    return rc;
}

/* Rank 0's status after something only it did (a save) reaches every rank. */
int run_dist_status(struct run *R, int rc0, const char *what, char *err, size_t cap)
{
    if (R->dist.world == 1) return rc0;
    int64_t v = rc0 < 0 ? rc0 : 0;
    const int rc = trn_dist_allreduce_i64(R->dist.comm, &v, 1, TRN_DIST_MIN);
    if (rc0 < 0) return rc0;
    if (rc < 0) {
        trn_seterr(err, cap, "%s: %s", what, trn_dist_error(R->dist.comm));
        return rc;
    }
    if (v < 0) {
        trn_seterr(err, cap, "rank 0 failed: %s (its log says why)", what);
        return -ECANCELED;
    }
    return 0;
}

void run_dist_free(struct run *R)
{
    free(R->dist.acc);
    R->dist.acc = NULL;
}
