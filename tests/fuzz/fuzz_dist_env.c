/*
 * Fuzz target: the launcher's variables (trainer/dist/dist.h), which come from outside the program
 * (torchrun, Slurm, Open MPI, or a user's shell). The input is an environment table, one
 * "KEY=VALUE" per line, and also, whole, a Slurm node list. Whatever it holds, the parse either
 * fails with a message or yields a rank inside its world, a local rank inside its node and a
 * port in range; the node list gives a host name no longer than its buffer, or an error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    char host[64];
    const int n = trn_dist_nodelist_first(host, sizeof host, text);
    if (n >= 0 && ((size_t)n >= sizeof host || strlen(host) != (size_t)n)) abort();

    const char *env[65];
    int k = 0;
    for (char *p = text, *nl; p && *p && k < 64; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        env[k++] = p;
    }
    env[k] = NULL;
    struct trn_dist_env e;
    char err[256];
    err[0] = '\0';
    if (trn_dist_env_parse(env, &e, err, sizeof err) == 0) {
        if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) abort();
        if (e.local_world_size < 1 || e.local_rank < 0 || e.local_rank >= e.local_world_size)
            abort();
        if (e.master_port < 0 || e.master_port > 65534) abort();
        if (strnlen(e.master_addr, sizeof e.master_addr) == sizeof e.master_addr) abort();
    } else if (!err[0]) {
        abort();
    }
    free(text);
    return 0;
}
