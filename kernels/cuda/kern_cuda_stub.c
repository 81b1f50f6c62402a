/*
 * The CUDA backend's always-present entry points in a build without CUDA (HAVE_CUDA 0): no op
 * table, no devices, no contexts. Keeps callers (the trainer's --device parsing, kern_ctx.c)
 * free of #if. No tensors, no gradients.
 */
#include "kern_cuda_internal.h"

const struct kern_ops *kern_ops_cuda(void)
{
    return NULL;
}

int kern_cuda_device_count(void)
{
    return 0;
}

void kern_cuda_profiler_range(int on)
{
    (void)on;
}

int kern_cuda_mem_info(size_t *used, size_t *total)
{
    (void)used, (void)total;
    return -KERN_EBACKEND;
}

void *kern_cuda_ctx_stream(struct kern_ctx *ctx)
{
    (void)ctx;
    return NULL;
}

int kern_cuda_ctx_sync(struct kern_ctx *ctx)
{
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

const char *kern_cuda_ctx_last_error(const struct kern_ctx *ctx)
{
    (void)ctx;
    return "";
}

int kern_cuda_ctx_create(const struct kern_ctx_opts *o, struct kern_ctx **out)
{
    if (!o || !out) return -EINVAL;
    *out = NULL;
    return -KERN_EBACKEND;
}

void kern_cuda_ctx_destroy(struct kern_ctx *ctx)
{
    (void)ctx;
}

int kern_cuda_ctx_reserve(struct kern_ctx *ctx, size_t bytes)
{
    (void)bytes;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

int kern_cuda_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes)
{
    (void)buf;
    (void)bytes;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

int kern_cuda_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out)
{
    (void)bytes;
    if (out) *out = NULL;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

void kern_cuda_mem_free(struct kern_ctx *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

int kern_cuda_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)dir;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

int kern_cuda_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes)
{
    (void)p;
    (void)bytes;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

int kern_cuda_conv2d_probe(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d, int op,
                           struct kern_plan_cand *heur, int *nheur, struct kern_plan_cand *find,
                           int *nfind)
{
    (void)d, (void)op, (void)heur, (void)nheur, (void)find, (void)nfind;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}

int kern_cuda_conv_plan_counts(struct kern_ctx *ctx, int counts[3])
{
    (void)counts;
    return ctx ? -KERN_EBACKEND : -EINVAL;
}
