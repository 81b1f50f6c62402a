/*
 * kern.h stands alone: it is the first include here, with nothing before it (style guide rule
 * 9). The checks pin the header's documented defaults and the helpers that carry no tensors.
 */
#include "kern.h"

#include <errno.h>
#include <string.h>

#include "tap.h"

int main(void)
{
    struct kern_ctx_opts o;
    memset(&o, 0x5a, sizeof(o));
    kern_ctx_opts_default(&o);
    ok(o.backend == KERN_BACKEND_CPU && o.threads == 0 && o.workspace == NULL &&
           o.workspace_size == 0,
       "kern_ctx_opts_default: CPU, threads 0, no workspace");

    struct kern_ctx *ctx = NULL;
    is_int(kern_ctx_create(NULL, &ctx), 0, "kern_ctx_create with default options");
    is_int(kern_ctx_backend(ctx), KERN_BACKEND_CPU, "context backend is CPU");
    is_int((long long)kern_ctx_workspace_size(ctx), 0, "no workspace until reserved");
    is_int(kern_ctx_reserve(ctx, 1000), 0, "reserve 1000 bytes");
    ok(kern_ctx_workspace_size(ctx) >= 1000, "workspace is at least the reserved size");
    static _Alignas(64) float borrowed[64];
    is_int(kern_ctx_set_workspace(ctx, borrowed, sizeof(borrowed)), 0, "borrow a workspace");
    is_int((long long)kern_ctx_workspace_size(ctx), (long long)sizeof(borrowed),
           "borrowed size reported");
    is_int(kern_ctx_set_workspace(ctx, (char *)borrowed + 4, 16), -EINVAL,
           "misaligned workspace refused");
    is_int(kern_ctx_set_workspace(ctx, NULL, 16), -EINVAL, "NULL workspace with a size refused");
    kern_ctx_destroy(ctx);
    is_int(kern_ctx_create(NULL, NULL), -EINVAL, "NULL out refused");

    struct kern_conv2d d;
    int oh = 0, ow = 0;
    kern_conv2d_init(&d, 8, 3, 640, 640, 32, 6, 2, 2);
    is_int(kern_conv2d_out_hw(&d, &oh, &ow), 0, "stem shape valid");
    ok(oh == 320 && ow == 320, "stem k6 s2 p2 on 640 gives 320x320 (got %dx%d)", oh, ow);
    ok(kern_conv2d_flops(&d) == 2.0 * 8 * 32 * 320 * 320 * 3 * 36, "conv2d FLOPs, 2 per MAC");

    struct kern_pool2d p = { 1, 256, 20, 20, 5, 1, 2, 0, 0 };
    is_int(kern_pool2d_out_hw(&p, &oh, &ow), 0, "SPPF pool shape valid");
    ok(oh == 20 && ow == 20, "MaxPool2d(5, 1, 2) keeps 20x20");

    struct kern_bn b;
    kern_bn_init(&b, 2, 16, 100);
    ok(b.eps == KERN_BN_EPS && b.momentum == KERN_BN_MOMENTUM && b.eps == 1e-3f &&
           b.momentum == 0.03f,
       "kern_bn_init: eps 1e-3, momentum 0.03");
    ok(KERN_CIOU_EPS == 1e-7f, "CIoU eps 1e-7");
    ok(kern_strerror(-KERN_EBACKEND) && strcmp(kern_strerror(-KERN_EBACKEND), strerror(EINVAL)),
       "KERN_EBACKEND has its own name");
    ok(kern_ops_ref() != NULL && kern_ops_ref()->backend == KERN_BACKEND_CPU,
       "kern_ops_ref: CPU table");
    return tap_done();
}
