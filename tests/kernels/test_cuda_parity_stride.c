/*
 * Channel slices on CUDA against the CPU reference (kern.h "Channel slices"): every op that
 * takes an n-stride, run on the GPU dense and with its strided side a slice of a wider poisoned
 * buffer (bit for bit equal, gaps untouched: stride_testutil.h), and the GPU's dense run against
 * the CPU reference's within each output's tolerance. Fresh random draws each run (--seed N
 * replays one); exits 77 with "# SKIP no CUDA device" where no device is visible.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_testutil.h"
#include "tap.h"

#include "cuda_testutil.h"
#include "parity.h"
#include "stride_testutil.h"

static void *cpu_up(const void *h, size_t bytes)
{
    void *const p = malloc(bytes ? bytes : 1);
    if (!p) kct_bail("malloc", "out of memory");
    memcpy(p, h, bytes);
    return p;
}

static void cpu_down(void *h, const void *d, size_t bytes)
{
    memcpy(h, d, bytes);
}

static void *gpu_up(const void *h, size_t bytes)
{
    return kct_up(h, bytes);
}

static void gpu_down(void *h, const void *d, size_t bytes)
{
    kct_down(h, d, bytes);
}

static void gpu_release(void *d)
{
    cudaFree(d);
}

void parity_stride(int bench)
{
    (void)bench; /* no benchmark in this suite */
    const struct st_env cpu = { "cpu", kern_ops_ref(), g_cpu, cpu_up, cpu_down, free };
    const struct st_env gpu = { "cuda", kern_ops_cuda(), g_gpu, gpu_up, gpu_down, gpu_release };
    st_all(&gpu, &cpu);
}
