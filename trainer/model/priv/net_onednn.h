/*
 * The CPU forward, and the training step, in oneDNN's blocked layout (docs/design.md, "The CPU
 * forward and training step on oneDNN"): executors net.c runs when the net was created with
 * trn_net_opts.cpu_engine asking for one (TRAINING below for the step). Internal to the model
 * module.
 *
 * CONTRACT. Built from the model's rows and the net's plan, once, for one batch and image size:
 * one oneDNN primitive per conv (BatchNorm folded into its weights and bias as val.py's
 * fuse_conv_and_bn does, SiLU as a swish post-op, a shortcut bottleneck's residual as a binary
 * add post-op), SPPF's max pools, the nearest 2x upsample and every concatenation, with the
 * activations in the blocked layout oneDNN's convolutions choose on this CPU (nChw16c with
 * AVX-512, nChw8c with AVX2). The images are read in place (NCHW); each Detect level's raw conv
 * output stays in the executor, blocked, and trn_dnn_decode / trn_dnn_head read it from there
 * (the decode and the head's reshape of net.c's reference path, on the blocked layout, on the
 * executor's threads: an NCHW copy and a decode on one thread took 18-20% of yolov5n's
 * inference). The numbers differ from the reference path by the summation order only: parity, not
 * bytes (tests/trainer/test_net_onednn.c).
 *
 * WEIGHTS. trn_dnn_load folds and reorders the model's current parameters and running
 * statistics into the primitives' own copies; a run uses what the last load saw.
 *
 * THREADS. oneDNN runs on OpenMP here (Debian's build); each run asks for `threads` of them.
 * One thread at a time per executor. The library never prints.
 *
 * Without oneDNN in the build (net_onednn_none.c) trn_dnn_built is false and create returns
 * -ENOTSUP.
 */
#ifndef TRN_NET_ONEDNN_H
#define TRN_NET_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

struct trn_dnn;
struct kern_detect;

/* Whether this build has the oneDNN executor. */
bool trn_dnn_built(void);

/*
 * An executor for model m at the plan's batch and size. threads: OpenMP threads per run (>= 1).
 * out: the executor on success. Returns 0, -ENOMEM, -ENOTSUP (not built), -TRN_MODEL_EONEDNN
 * (err names the primitive oneDNN refused).
 */
int trn_dnn_create(const struct trn_model *m, const struct trn_act_plan *pl, int threads,
                   struct trn_dnn **out, char *err, size_t err_cap);

/* Fold and reorder m's parameters and BN running statistics into the executor. Returns 0 or
 * -TRN_MODEL_EONEDNN. */
int trn_dnn_load(struct trn_dnn *d, const struct trn_model *m);

/* The forward on images (batch x ch x h x w float NCHW, borrowed for the call). Returns 0 or
 * -TRN_MODEL_EONEDNN. */
int trn_dnn_run(struct trn_dnn *d, const float *images);

/*
 * After a run of an executor from trn_dnn_create: kern_ref_detect_decode of every image's Detect
 * levels into out (batch, rows, no), each image's rows level after level (levels: the model's,
 * det[l] each one's geometry with the batch as bs, anchors each level's na (w, h) pairs in grid
 * units one level after another, rows the sum of na ny nx), with the same bits
 * (kern_detect_blk_decode), on the executor's threads. Returns 0, -EINVAL (a geometry or count
 * that is not the executor's).
 */
int trn_dnn_decode(struct trn_dnn *d, const struct kern_detect *det, int levels,
                   const float *anchors, float *out, size_t rows);

/* After such a run: each Detect level into head[l] (bs, na, ny, nx, no), the bytes of
 * kern_ref_detect_reshape_fwd (kern_detect_blk_fwd). Returns 0 or -EINVAL as trn_dnn_decode. */
int trn_dnn_head(struct trn_dnn *d, const struct kern_detect *det, int levels, float *const *head);

/* Bytes of tensor memory the executor holds (activations and weight copies). */
size_t trn_dnn_bytes(const struct trn_dnn *d);

/* The activation layout the executor chose ("nChw16c", "nChw8c", ...), for log lines. */
const char *trn_dnn_layout(const struct trn_dnn *d);

void trn_dnn_destroy(struct trn_dnn *d);

/*
 * TRAINING. An executor of the training step for model m at the plan's batch and size: the
 * forward in train mode (conv, then BatchNorm with the batch's statistics, reading gamma and beta
 * in place from the PARAM arena, then SiLU; the residual in place) and its backward, activations
 * and their gradients blocked. The forward reorders the PARAM arena's weights into the convs'
 * layouts at every call (the optimizer moves them). grad: the net's grad arena (PARAM layout),
 * into which the backward ADDS every parameter's gradient, as trn_net_backward does; head[l]:
 * level l's output (borrowed), written by the forward already reshaped as the loss reads it
 * (bs, na, ny, nx, no: kern_ref_detect_reshape_fwd's layout, bit for bit its values), with no
 * NCHW tensor between. No gradient for the images. Returns as trn_dnn_create.
 */
int trn_dnn_train_create(struct trn_model *m, const struct trn_act_plan *pl, int threads,
                         float *grad, float *const *head, struct trn_dnn **out, char *err,
                         size_t err_cap);

/*
 * The training executor's hooks, as trn_net_opts' (net.h): bn_allreduce (SyncBatchNorm; NULL:
 * off) sums each BN layer's KERN_BN_SUMS_LEN(c) buffer over the ranks, once per BN layer in
 * layer order in the forward and in reverse in the backward, the reference backward's sequence;
 * row_done(row_ctx, i) (NULL: none) is called once per model row, n_layers - 1 down to 0, when
 * the backward is done writing row i's parameter gradients. A negative return stops the forward
 * or backward, which returns it.
 */
void trn_dnn_train_hooks(struct trn_dnn *d, int (*bn_allreduce)(void *, double *, size_t),
                         void *bn_ctx, int (*row_done)(void *, int), void *row_ctx);

/* The training forward on images: head written, the model's BN running statistics moved
 * (momentum TRN_MODEL_BN_MOMENTUM, unbiased batch variance) and, with count, each
 * num_batches_tracked + 1. Returns 0 or -TRN_MODEL_EONEDNN. */
int trn_dnn_train_forward(struct trn_dnn *d, struct trn_model *m, const float *images, bool count);

/* The backward of the last training forward from dhead[0 .. levels) (the head's gradients, in
 * its layout; read during the call): adds into grad. Returns 0, -EINVAL or -TRN_MODEL_EONEDNN. */
int trn_dnn_train_backward(struct trn_dnn *d, const float *const *dhead, int levels);

/*
 * The training head left where the Detect convs write it, for a loss that reads it there
 * (kern_yolo_loss.blk): on, the forward no longer reshapes the Detect outputs into the head, and
 * the backward takes a dhead[l] that is trn_dnn_train_raw's dp as it is (another pointer is still
 * read in the head's layout). Returns the layout's channel block (16 or 8).
 */
int trn_dnn_train_raw_head(struct trn_dnn *d, bool on);

/* Level l's Detect conv output, (bs, ceil(na no / blk), ny, nx, blk), after a training forward,
 * and the buffer of its gradient, which the backward reads first (nothing else shares it before
 * then). Returns 0 or -EINVAL (no such level). */
int trn_dnn_train_raw(struct trn_dnn *d, int l, const float **p, float **dp);

#endif
