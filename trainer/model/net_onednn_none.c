/*
 * The oneDNN executor's stand-in for builds without oneDNN (priv/net_onednn.h): nothing can be
 * created, so net.c stays on the reference ops.
 */
#include "priv/net_onednn.h"

#include <errno.h>

bool trn_dnn_built(void)
{
    return false;
}

int trn_dnn_create(const struct trn_model *m, const struct trn_act_plan *pl, int threads,
                   struct trn_dnn **out, char *err, size_t err_cap)
{
    (void)m, (void)pl, (void)threads, (void)out, (void)err, (void)err_cap;
    return -ENOTSUP;
}

int trn_dnn_load(struct trn_dnn *d, const struct trn_model *m)
{
    (void)d, (void)m;
    return -ENOTSUP;
}

int trn_dnn_run(struct trn_dnn *d, const float *images)
{
    (void)d, (void)images;
    return -ENOTSUP;
}

int trn_dnn_decode(struct trn_dnn *d, const struct kern_detect *det, int levels,
                   const float *anchors, float *out, size_t rows)
{
    (void)d, (void)det, (void)levels, (void)anchors, (void)out, (void)rows;
    return -ENOTSUP;
}

int trn_dnn_head(struct trn_dnn *d, const struct kern_detect *det, int levels, float *const *head)
{
    (void)d, (void)det, (void)levels, (void)head;
    return -ENOTSUP;
}

size_t trn_dnn_bytes(const struct trn_dnn *d)
{
    (void)d;
    return 0;
}

const char *trn_dnn_layout(const struct trn_dnn *d)
{
    (void)d;
    return "";
}

void trn_dnn_destroy(struct trn_dnn *d)
{
    (void)d;
}

int trn_dnn_train_create(struct trn_model *m, const struct trn_act_plan *pl, int threads,
                         float *grad, float *const *head, struct trn_dnn **out, char *err,
                         size_t err_cap)
{
    (void)m, (void)pl, (void)threads, (void)grad, (void)head, (void)out, (void)err, (void)err_cap;
    return -ENOTSUP;
}

int trn_dnn_train_forward(struct trn_dnn *d, struct trn_model *m, const float *images, bool count)
{
    (void)d, (void)m, (void)images, (void)count;
    return -ENOTSUP;
}

void trn_dnn_train_hooks(struct trn_dnn *d, int (*bn_allreduce)(void *, double *, size_t),
                         void *bn_ctx, int (*row_done)(void *, int), void *row_ctx)
{
    (void)d, (void)bn_allreduce, (void)bn_ctx, (void)row_done, (void)row_ctx;
}

int trn_dnn_train_backward(struct trn_dnn *d, const float *const *dhead, int levels)
{
    (void)d, (void)dhead, (void)levels;
    return -ENOTSUP;
}

int trn_dnn_train_raw_head(struct trn_dnn *d, bool on)
{
    (void)d, (void)on;
    return -ENOTSUP;
}

int trn_dnn_train_raw(struct trn_dnn *d, int l, const float **p, float **dp)
{
    (void)d, (void)l, (void)p, (void)dp;
    return -ENOTSUP;
}
