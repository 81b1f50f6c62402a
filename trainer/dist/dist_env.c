/* The launcher's variables as pure functions, and the names of backends and errors (dist.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "priv/dist_internal.h"
#include "util.h"
#include "errors.h"

static const char *const backend_names[] = { "auto", "single", "tcp", "mpi", "nccl" };

const char *trn_dist_backend_name(enum trn_dist_backend b)
{
    return (unsigned)b < sizeof backend_names / sizeof backend_names[0] ? backend_names[b] : "?";
}

int trn_dist_backend_parse(const char *name, enum trn_dist_backend *out)
{
    for (unsigned k = 0; name && k < sizeof backend_names / sizeof backend_names[0]; k++)
        if (!strcmp(name, backend_names[k])) {
            *out = (enum trn_dist_backend)k;
            return 0;
        }
    return -EINVAL;
}

bool trn_dist_backend_available(enum trn_dist_backend b)
{
    switch (b) {
    case TRN_DIST_AUTO:
    case TRN_DIST_SINGLE:
    case TRN_DIST_TCP:
        return true;
    case TRN_DIST_MPI:
        return dist_mpi_backend() != NULL;
    case TRN_DIST_NCCL:
        return dist_nccl_backend() != NULL;
    }
    return false;
}

const char *trn_dist_strerror(int rc)
{
    switch (rc) {
    case -ETIMEDOUT:
        return "a peer did not answer before the deadline (hung, stopped, or slower than "
               "--dist-timeout)";
    case -ECONNRESET:
        return "a peer closed its connection (it exited or crashed)";
    case -EPROTO:
        return "the ranks disagree (different collectives, or another job on the port)";
    case -ENOTSUP:
        return "backend not built into this program";
    default:
        return trn_strerror(rc);
    }
}

void trn_dist_opts_default(struct trn_dist_opts *o)
{
    memset(o, 0, sizeof *o);
    o->backend = TRN_DIST_AUTO;
    o->timeout_s = 1800;
    o->bucket_bytes = (size_t)25 << 20;
    o->port_offset = 1;
    o->device = -1;
    o->overlap = true;
    o->first_bucket_bytes = (size_t)1 << 20;
    o->heartbeat_s = 30;
}

static const char *env_get(const char *const *env, const char *key)
{
    const size_t kl = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], key, kl) && env[i][kl] == '=') return env[i] + kl + 1;
    return NULL;
}

/* A whole decimal number in [lo, hi] (surrounding blanks refused). */
static int parse_int(const char *s, long lo, long hi, int *out)
{
    if (!s || !*s) return -EINVAL;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -EINVAL;
    *out = (int)v;
    return 0;
}

/* Read key as an int in [lo, hi] into *out; a missing key leaves *out. */
static int env_int(const char *const *env, const char *key, long lo, long hi, int *out, char *err,
                   size_t cap)
{
    const char *v = env_get(env, key);
    if (!v) return 0;
    if (parse_int(v, lo, hi, out) < 0) {
        trn_seterr(err, cap, "%s='%s' is not a whole number in [%ld, %ld]", key, v, lo, hi);
        return -EINVAL;
    }
    return 0;
}

int trn_dist_nodelist_first(char *dst, size_t dst_cap, const char *list)
{
    if (!list || !*list) return -EINVAL;
    size_t n = 0;
    int depth = 0;
    for (const char *p = list; *p; p++) {
        if (*p == ',' && depth == 0) break; /* the first host ends at a top-level comma */
        if (*p == '[') {
            if (depth++) return -EINVAL;
            /* the group's first value: up to the first ',' or '-' or ']' */
            const char *q = p + 1;
            size_t len = strcspn(q, ",-]");
            if (len == 0) return -EINVAL;
            if (n + len >= dst_cap) return -ENAMETOOLONG;
            memcpy(dst + n, q, len);
            n += len;
            p = strchr(q, ']');
            if (!p) return -EINVAL;
            depth = 0;
            continue;
        }
        if (*p == ']') return -EINVAL;
        if (n + 1 >= dst_cap) return -ENAMETOOLONG;
        dst[n++] = *p;
    }
    if (n == 0) return -EINVAL;
    dst[n] = '\0';
    return (int)n;
}

/* Tasks on node `node` from Slurm's compressed per-node list ("8(x2),4": 8 on nodes 0 and 1,
 * 4 on node 2), or -1 when the list does not say (malformed, too short). */
static int slurm_tasks_on(const char *list, long node)
{
    long at = 0;
    for (const char *p = list; *p;) {
        char *end;
        errno = 0;
        const long n = strtol(p, &end, 10);
        if (errno || end == p || n < 1 || n > (1 << 20)) return -1;
        long times = 1;
        if (*end == '(') {
            if (end[1] != 'x') return -1;
            const char *q = end + 2;
            times = strtol(q, &end, 10);
            if (errno || end == q || times < 1 || times > (1 << 20) || *end != ')') return -1;
            end++;
        }
        if (node >= at && node < at + times) return (int)n;
        at += times;
        if (*end == ',')
            p = end + 1;
        else if (*end)
            return -1;
        else
            break;
    }
    return -1;
}

int trn_dist_env_parse(const char *const *env, struct trn_dist_env *out, char *err, size_t cap)
{
    if (err && cap) err[0] = '\0';
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    out->world_size = 1;
    out->local_world_size = 1;
    const char *rank_key = NULL, *world_key = NULL, *local_key = NULL, *lworld_key = NULL;
    if (env_get(env, "RANK") && env_get(env, "WORLD_SIZE")) {
        out->source = TRN_DIST_SRC_TORCHRUN;
        rank_key = "RANK";
        world_key = "WORLD_SIZE";
        local_key = "LOCAL_RANK";
        lworld_key = "LOCAL_WORLD_SIZE";
    } else if (env_get(env, "SLURM_PROCID") && env_get(env, "SLURM_NTASKS") &&
               !env_get(env, "OMPI_COMM_WORLD_RANK")) {
        out->source = TRN_DIST_SRC_SLURM;
        rank_key = "SLURM_PROCID";
        world_key = env_get(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        local_key = "SLURM_LOCALID";
        lworld_key = NULL; /* SLURM_TASKS_PER_NODE is a compressed list: read below */
    } else if (env_get(env, "OMPI_COMM_WORLD_RANK") && env_get(env, "OMPI_COMM_WORLD_SIZE")) {
        out->source = TRN_DIST_SRC_OMPI;
        rank_key = "OMPI_COMM_WORLD_RANK";
        world_key = "OMPI_COMM_WORLD_SIZE";
        local_key = "OMPI_COMM_WORLD_LOCAL_RANK";
        lworld_key = "OMPI_COMM_WORLD_LOCAL_SIZE";
    }
    int rc = 0;
    if (out->source != TRN_DIST_SRC_NONE) {
        rc = env_int(env, world_key, 1, 1 << 20, &out->world_size, err, cap);
        if (!rc) rc = env_int(env, rank_key, 0, out->world_size - 1, &out->rank, err, cap);
        out->local_world_size = out->world_size;
        if (!rc && lworld_key)
            rc = env_int(env, lworld_key, 1, out->world_size, &out->local_world_size, err, cap);
        if (!rc && out->source == TRN_DIST_SRC_SLURM) {
            /* this node's tasks (the RAM cache shared by them needs the count); the job's
             * whole size where the list does not say */
            const char *per = env_get(env, "SLURM_STEP_TASKS_PER_NODE");
            if (!per) per = env_get(env, "SLURM_TASKS_PER_NODE");
            const char *node = env_get(env, "SLURM_NODEID");
            char *e = NULL;
            const long id = node ? strtol(node, &e, 10) : -1;
            const int k = per && node && e && !*e && id >= 0 ? slurm_tasks_on(per, id) : -1;
            if (k > 0 && k <= out->world_size) out->local_world_size = k;
        }
        out->local_rank = out->local_world_size == out->world_size ? out->rank : 0;
        if (!rc && local_key)
            rc = env_int(env, local_key, 0, out->local_world_size - 1, &out->local_rank, err, cap);
        if (rc) return rc;
    }
    const char *addr = env_get(env, "MASTER_ADDR");
    if (addr) {
        if (!*addr || strlen(addr) >= sizeof out->master_addr) {
            trn_seterr(err, cap, "MASTER_ADDR='%s' is empty or too long", addr);
            return -EINVAL;
        }
        snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
    } else if (out->source == TRN_DIST_SRC_SLURM) {
        static const char *const lists[] = { "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                             "SLURM_NODELIST" };
        for (int k = 0; k < 3 && !out->master_addr[0]; k++) {
            const char *l = env_get(env, lists[k]);
            if (!l) continue;
            if (trn_dist_nodelist_first(out->master_addr, sizeof out->master_addr, l) < 0) {
                trn_seterr(err, cap, "%s='%s' is not a Slurm node list", lists[k], l);
                out->master_addr[0] = '\0';
                return -EINVAL;
            }
        }
    }
    if ((rc = env_int(env, "MASTER_PORT", 1, 65534, &out->master_port, err, cap)) < 0) return rc;
    if (!out->master_port && out->source == TRN_DIST_SRC_SLURM && env_get(env, "SLURM_JOB_ID")) {
        /* one port per job, the same on every node of it */
        int job = 0;
        if (env_int(env, "SLURM_JOB_ID", 0, INT_MAX, &job, err, cap) < 0) return -EINVAL;
        out->master_port = 20000 + job % 20000;
    }
    return 0;
}
