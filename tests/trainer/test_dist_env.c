/*
 * trainer/dist/dist.h's pure functions: the launcher's variables (torchrun, Slurm, Open MPI, in
 * that order, and mpirun inside a Slurm job) and the first host of a Slurm node list.
 */
#include <errno.h>
#include <string.h>

#include "dist.h"
#include "tap.h"

static int parse(const char *const *env, struct trn_dist_env *e, char *err, size_t cap)
{
    return trn_dist_env_parse(env, e, err, cap);
}

static void test_nodelist(void)
{
    static const struct {
        const char *list, *first;
    } cases[] = {
        { "node[03-05,07]", "node03" },
        { "node07", "node07" },
        { "a1,b2", "a1" },
        { "node[03-05,07],gpu[1-2]", "node03" },
        { "rack[1-2]-n[08-09]", "rack1-n08" },
        { "gpu-[7]-ib", "gpu-7-ib" },
        { "n[10,2-3]", "n10" },
        { "c[001-128]", "c001" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char out[64] = "";
        const int n = trn_dist_nodelist_first(out, sizeof out, cases[k].list);
        ok(n == (int)strlen(cases[k].first) && !strcmp(out, cases[k].first),
           "'%s' -> '%s' (got '%s')", cases[k].list, cases[k].first, out);
    }
    static const char *const bad[] = { "", "node[", "node]", "x[,1]", "[]", "a[1[2]]", ",a" };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char out[64];
        is_int(trn_dist_nodelist_first(out, sizeof out, bad[k]), -EINVAL, "'%s' is refused",
               bad[k]);
    }
    char small[6];
    is_int(trn_dist_nodelist_first(small, sizeof small, "node[03-05]"), -ENAMETOOLONG,
           "a destination too small is -ENAMETOOLONG");
}

static void test_sources(void)
{
    struct trn_dist_env e;
    char err[256];
    const char *none[] = { "HOME=/root", "PATH=/bin", NULL };
    ok(parse(none, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_NONE && e.rank == 0 &&
           e.world_size == 1 && e.local_rank == 0 && e.local_world_size == 1 && !e.master_addr[0] &&
           e.master_port == 0,
       "no launcher: rank 0 of 1");
    ok(parse(NULL, &e, err, sizeof err) == 0 && e.world_size == 1, "NULL table: rank 0 of 1");

    const char *torch[] = { "RANK=3",
                            "WORLD_SIZE=8",
                            "LOCAL_RANK=1",
                            "LOCAL_WORLD_SIZE=4",
                            "MASTER_ADDR=10.0.0.1",
                            "MASTER_PORT=29500",
                            "RANKX=9",
                            NULL };
    ok(parse(torch, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_TORCHRUN && e.rank == 3 &&
           e.world_size == 8 && e.local_rank == 1 && e.local_world_size == 4 &&
           !strcmp(e.master_addr, "10.0.0.1") && e.master_port == 29500,
       "torchrun: rank 3 of 8, local 1 of 4, 10.0.0.1:29500");

    const char *all[] = { "SLURM_PROCID=5",
                          "SLURM_NTASKS=16",
                          "OMPI_COMM_WORLD_RANK=7",
                          "OMPI_COMM_WORLD_SIZE=9",
                          "RANK=2",
                          "WORLD_SIZE=4",
                          NULL };
    ok(parse(all, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_TORCHRUN && e.rank == 2 &&
           e.world_size == 4 && e.local_rank == 2 && e.local_world_size == 4,
       "torchrun's variables win over Slurm's and Open MPI's (no LOCAL_*: local = global)");

    const char *slurm[] = { "SLURM_PROCID=5",
                            "SLURM_NTASKS=8",
                            "SLURM_LOCALID=1",
                            "SLURM_JOB_NODELIST=other[1-9]",
                            "SLURM_STEP_NODELIST=node[03-05,07]",
                            "SLURM_JOB_ID=123456",
                            NULL };
    ok(parse(slurm, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_SLURM && e.rank == 5 &&
           e.world_size == 8 && e.local_rank == 1 && !strcmp(e.master_addr, "node03") &&
           e.master_port == 20000 + 123456 % 20000,
       "Slurm: rank 5 of 8, local 1, master node03 (the step's list), port from the job id "
       "(%s:%d)",
       e.master_addr, e.master_port);
    const char *slurm2[] = { "SLURM_PROCID=1",         "SLURM_NTASKS=64",
                             "SLURM_STEP_NUM_TASKS=4", "SLURM_LOCALID=1",
                             "SLURM_NODELIST=gpu7",    "MASTER_ADDR=head",
                             "MASTER_PORT=1234",       NULL };
    ok(parse(slurm2, &e, err, sizeof err) == 0 && e.world_size == 4 &&
           !strcmp(e.master_addr, "head") && e.master_port == 1234,
       "Slurm: the step's task count; MASTER_ADDR / MASTER_PORT override the node list");
    const char *slurm3[] = { "SLURM_PROCID=17",
                             "SLURM_NTASKS=20",
                             "SLURM_LOCALID=1",
                             "SLURM_NODEID=2",
                             "SLURM_NODELIST=n[1-3]",
                             "SLURM_STEP_TASKS_PER_NODE=8(x2),4",
                             NULL };
    ok(parse(slurm3, &e, err, sizeof err) == 0 && e.local_world_size == 4 && e.local_rank == 1,
       "Slurm: this node's tasks from the compressed per-node list (8(x2),4: node 2 has 4): %d",
       e.local_world_size);
    const char *slurm4[] = { "SLURM_PROCID=3",
                             "SLURM_NTASKS=16",
                             "SLURM_LOCALID=3",
                             "SLURM_NODEID=1",
                             "SLURM_NODELIST=n[1-2]",
                             "SLURM_TASKS_PER_NODE=8(x",
                             NULL };
    ok(parse(slurm4, &e, err, sizeof err) == 0 && e.local_world_size == 16,
       "Slurm: a per-node list that does not parse leaves the job's size as the node's");

    const char *mpirun_in_slurm[] = { "SLURM_PROCID=0",
                                      "SLURM_NTASKS=2",
                                      "SLURM_NODELIST=n[1-2]",
                                      "OMPI_COMM_WORLD_RANK=3",
                                      "OMPI_COMM_WORLD_SIZE=8",
                                      "OMPI_COMM_WORLD_LOCAL_RANK=3",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                                      NULL };
    ok(parse(mpirun_in_slurm, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_OMPI &&
           e.rank == 3 && e.world_size == 8 && e.local_rank == 3 && e.local_world_size == 4,
       "mpirun inside a Slurm job: Open MPI's numbers, not the daemons' Slurm ones");

    const char *ompi[] = {
        "OMPI_COMM_WORLD_RANK=2",       "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=0",
        "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=h0",         NULL
    };
    ok(parse(ompi, &e, err, sizeof err) == 0 && e.source == TRN_DIST_SRC_OMPI && e.rank == 2 &&
           e.world_size == 4 && e.local_rank == 0 && e.local_world_size == 2 &&
           !strcmp(e.master_addr, "h0") && e.master_port == 0,
       "Open MPI: rank 2 of 4, local 0 of 2, MASTER_ADDR kept, no port");
}

static void test_errors(void)
{
    struct trn_dist_env e;
    static const struct {
        const char *env[4];
        const char *names;
    } bad[] = {
        { { "RANK=4", "WORLD_SIZE=4", NULL }, "RANK" },
        { { "RANK=-1", "WORLD_SIZE=4", NULL }, "RANK" },
        { { "RANK=1x", "WORLD_SIZE=4", NULL }, "RANK" },
        { { "RANK=0", "WORLD_SIZE=0", NULL }, "WORLD_SIZE" },
        { { "RANK=0", "WORLD_SIZE=", NULL }, "WORLD_SIZE" },
        { { "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=2" }, "LOCAL_RANK" },
        { { "RANK=0", "WORLD_SIZE=2", "MASTER_PORT=65535" }, "MASTER_PORT" },
        { { "RANK=0", "WORLD_SIZE=2", "MASTER_PORT=0" }, "MASTER_PORT" },
        { { "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODELIST=node[03-05" }, "SLURM_NODELIST" },
        { { "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2", NULL }, "OMPI_COMM_WORLD_RANK" },
        { { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=" }, "MASTER_ADDR" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char err[256] = "";
        const char *env[5] = { bad[k].env[0], bad[k].env[1], bad[k].env[2], NULL, NULL };
        const int rc = parse(env, &e, err, sizeof err);
        ok(rc == -EINVAL && strstr(err, bad[k].names), "%s %s %s: -EINVAL naming %s ('%s')", env[0],
           env[1] ? env[1] : "", env[2] ? env[2] : "", bad[k].names, err);
    }
}

static void test_names(void)
{
    for (int b = TRN_DIST_AUTO; b <= TRN_DIST_NCCL; b++) {
        enum trn_dist_backend got;
        ok(trn_dist_backend_parse(trn_dist_backend_name((enum trn_dist_backend)b), &got) == 0 &&
               got == (enum trn_dist_backend)b,
           "backend name '%s' round-trips", trn_dist_backend_name((enum trn_dist_backend)b));
    }
    enum trn_dist_backend got;
    is_int(trn_dist_backend_parse("gloo", &got), -EINVAL, "an unknown backend is refused");
    ok(trn_dist_backend_available(TRN_DIST_TCP) && trn_dist_backend_available(TRN_DIST_SINGLE),
       "TCP and single are always built");
}

int main(void)
{
    test_nodelist();
    test_sources();
    test_errors();
    test_names();
    return tap_done();
}
