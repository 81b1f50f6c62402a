/*
 * Graphs (kern.h "Graphs"): a caller's function of ops recorded once and replayed. No tensors
 * here, no gradients. The CPU backend records nothing: a replay is a call, so results and errors
 * are the direct call's. CUDA contexts go to kernels/cuda/kern_cuda_graph.cu (stream capture);
 * the hooks exist only in CUDA builds, where alone a CUDA context can be made.
 */
#include <errno.h>
#include <stdlib.h>

#include "ffyolo_config.h"
#include "kern_internal.h"

#if HAVE_CUDA
/* The CUDA side (kern_cuda_graph.cu; declared for C and CUDA in kernels/include/kern_cuda.h, which
 * this library's include path does not reach). *exec receives the instantiated graph. */
int kern_cuda_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg, void **exec);
int kern_cuda_graph_replay(struct kern_ctx *ctx, void *exec);
void kern_cuda_graph_destroy(struct kern_ctx *ctx, void *exec);
#endif

struct kern_graph {
    struct kern_ctx *ctx; /* borrowed; outlives the graph */
    kern_graph_fn fn;     /* CPU: called at every replay */
    void *arg;            /* borrowed */
    void *exec;           /* CUDA: the backend's instantiated graph; NULL on the CPU */
};

int kern_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg, struct kern_graph **out)
{
    if (out) *out = NULL;
    KERN_RETURN_IF(!ctx || !fn || !out, -EINVAL);
    struct kern_graph *const g = calloc(1, sizeof(*g));
    if (!g) return -ENOMEM;
    g->ctx = ctx;
    g->fn = fn;
    g->arg = arg;
    int rc;
#if HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        rc = kern_cuda_graph_capture(ctx, fn, arg, &g->exec);
    else
#endif
        rc = ctx->backend == KERN_BACKEND_CPU ? fn(arg) : -KERN_EBACKEND;
    if (rc < 0) {
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int kern_graph_replay(struct kern_graph *g)
{
    KERN_RETURN_IF(!g, -EINVAL);
#if HAVE_CUDA
    if (g->exec) return kern_cuda_graph_replay(g->ctx, g->exec);
#endif
    return g->fn(g->arg);
}

void kern_graph_destroy(struct kern_graph *g)
{
    if (!g) return;
#if HAVE_CUDA
    if (g->exec) kern_cuda_graph_destroy(g->ctx, g->exec);
#endif
    free(g);
}
