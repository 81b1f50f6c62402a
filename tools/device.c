/* --device for yolo-val and yolo-detect (device.h). */
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kern_cuda.h"
#include "net.h"

int tool_parse_device(const char *v, void *dst, char *why, size_t cap)
{
    char *end = NULL;
    const long d = strtol(v, &end, 10);
    if (strcmp(v, "cpu") && (end == v || *end || d < 0 || d > 63)) {
        snprintf(why, cap, "is not cpu or a CUDA device number");
        return -EINVAL;
    }
    *(const char **)dst = v;
    return 0;
}

int tool_pick_device(const char *prog, const char *d)
{
    const int count = kern_cuda_device_count();
    if (!d) return count > 0 ? 0 : -1;
    if (!strcmp(d, "cpu")) return -1;
    const int id = atoi(d);
    if (id < count) return id;
    fprintf(stderr,
            "%s: --device %s: CUDA device %d is not there (%d visible%s)\n"
            "hint: --device cpu runs on the CPU\n",
            prog, d, id, count, count ? "" : "; or this build has no CUDA");
    return -2;
}

int tool_cpu_engine(const char *e)
{
    if (e && !strcmp(e, "reference")) return TRN_CPU_ENGINE_REF;
    if (e && !strcmp(e, "onednn")) return TRN_CPU_ENGINE_ONEDNN;
    return TRN_CPU_ENGINE_AUTO;
}

void tool_omp_wait(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    /* libgomp takes GOMP_SPINCOUNT over the policy's own count; PASSIVE is what a libgomp
       that ignores it (or another OpenMP runtime) falls back to */
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) || setenv("GOMP_SPINCOUNT", "5000", 1)) return;
    execv("/proc/self/exe", argv); /* keeps the pid, the descriptors and the rest of the env */
}
