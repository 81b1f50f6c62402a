/*
 * The YOLOv5 network: forward and backward pass of a model resolved by model.h, on the kern ops
 * (kernels/include/kern.h: the CPU reference or the CUDA twin), with every buffer planned once at
 * creation.
 *
 * LAYOUT. Tensors are float32 NCHW. The activation arena follows trn_model_plan (one slot per
 * trn_act; acts[0] holds a copy of the images); a second arena (trn_act.doff) holds the
 * activation gradients during backward. Concat inputs the plan places in their concat buffer's
 * channel slice (model.h CONCAT SLICES) are written there by their producers and read there by
 * their readers through the kern ops' n-strides (BN y_nstride, conv x_nstride, pool and
 * upsample strides, the AMP _ns casts), so their concat copies (and, for gradient slices, the
 * copies back) are skipped. Parameter gradients live in a grad arena with the
 * model's TRN_ARENA_PARAM layout (same length and offsets, so tensor t's gradient is at
 * trn_net_grad(net) + trn_model_tensor(m, t)->offset). The Detect outputs are returned as
 * PyTorch's training output: per level l, (bs, na, ny, nx, no), no = nc + 5, i.e.
 * x.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2).contiguous().
 *
 * MODULES (recipe S2). Conv = conv (no bias) + BatchNorm2d (eps 1e-3, momentum 0.03) + SiLU;
 * Bottleneck adds its input when shortcut and c1 == c2; C3 = cv3(cat[m(cv1(x)), cv2(x)]) with
 * the bottleneck branch first; SPPF = cv2(cat[x, p(x), p(p(x)), p(p(p(x)))]), x = cv1(in),
 * p = maxpool 5 / stride 1 / pad 2; Upsample nearest x2; Concat in `from` order; Detect 1x1
 * convs with bias.
 *
 * BATCH NORM. A training forward normalises with the batch statistics and updates running_mean,
 * running_var (momentum 0.03, unbiased variance) in the model's buffer arena and adds 1 to each
 * num_batches_tracked, as PyTorch's train mode does; an eval forward normalises with the running
 * statistics and changes nothing in the model.
 * SyncBatchNorm (trn_net_opts.bn_allreduce set): a training forward computes each BN layer's
 * statistics in phases (kern.h "Batch norm in phases"): this net's per-channel sums, the hook
 * (which sums them over the data-parallel ranks), then the normalisation with the global mean and
 * biased variance and the running-stat update with the global count's unbiased variance; the
 * backward likewise sums (sum dz, sum dz xhat) before computing dx. The BN parameter gradients
 * stay this net's own (the caller's gradient all-reduce sums them, as DDP with PyTorch's
 * SyncBatchNorm does). The hook runs once per BN layer, in layer order in the forward and in
 * reverse order in the backward, the same sequence for every net of one model: so every rank
 * must run the same forwards and backwards (any batch size: the count is summed too).
 *
 * GRADIENTS. trn_net_backward ADDS (+=) into the parameter grad arena, so calls over several
 * micro-batches accumulate; trn_net_zero_grad clears it. The input gradient (optional) is
 * overwritten (=) by each backward.
 * Gradient-ready hook (trn_net_opts.grad_ready, for data-parallel all-reduce overlapped with
 * backward): every parameter belongs to exactly one yaml row, and the PARAM layout keeps each
 * row's tensors together in row order, so row i owns one range [start_i, start_{i+1}) of the
 * arena (its padding included; the ranges of rows 0 .. n_layers - 1 tile the whole arena; a row
 * without parameters has an empty range). Backward walks the rows in reverse and no row writes
 * another's parameter gradients, so once row i's backward is done its range is final for this
 * backward: the hook is called then, once per row, n_layers - 1 down to 0. From that call until
 * the backward returns the net never touches the range again, so the hook may hand it to another
 * thread (which must be done with it before the next forward, backward, zero_grad or
 * trn_net_grad write on this net).
 *
 * ERRORS. Functions returning int give 0 on success or a negative code: -EINVAL (bad
 * arguments or call order), -ENOMEM, -TRN_MODEL_ESHAPE (an image size the model cannot take),
 * -TRN_MODEL_EUNSUPPORTED (an Upsample factor other than 2), a kern code (-KERN_E*), or
 * what trn_net_opts.bn_allreduce or grad_ready returned.
 * trn_strerror names each. The library never prints and never exits.
 *
 * DEVICES. A net on a CUDA context (trn_net_opts.device) runs the same ops from kern_ops_cuda()
 * on device memory; every pointer this API takes or returns stays host memory. Each forward
 * uploads the model's parameters and buffers (the optimizer updates the host model), a training
 * forward brings the BN running statistics back, outputs and decoded boxes are copied to host
 * mirrors, and backward copies the gradients to a host mirror that trn_net_grad returns (writes
 * to it are not seen by the device: call trn_net_zero_grad between steps, as the trainer does).
 * The view getters (trn_net_layer_output, trn_net_act, trn_net_input_grad) share one host copy:
 * on a GPU net each result is valid until the next getter call. On a CPU net they point into
 * the arena, but for a concat slice: that is gathered into a dense copy of its own at each call
 * (valid for the net's life, its contents as of the call).
 *
 * RESIDENT. trn_net_set_resident(net, true) turns the device copies of the parameter and buffer
 * arenas (trn_net_dev_arena) into the master copies: forwards no longer upload the model's arenas
 * nor bring the BN running statistics back, and backward leaves the gradients in the backend's
 * arena (trn_net_dev_grad) without refreshing the host mirror (the gradient-ready hook still gets
 * each row's host copy). The caller then updates parameters on the device (trn_optim_dev_step)
 * and moves them with trn_net_sync_model / trn_net_sync_grad where the host needs them
 * (checkpoints, validation, resume). With trn_net_forward_dev and trn_net_backward_dev, whose
 * inputs and outputs are backend memory, a training step copies nothing but the batch. On a CPU
 * net (not the device data path) the model's arenas are the backend's: resident is a no-op and
 * the dev getters return the model's arenas and the grad arena.
 *
 * AUTOCAST (trn_net_opts.amp = KERN_DT_BF16 or KERN_DT_F16), as torch.autocast with every conv
 * in the lower-precision list and nothing else: the convs read the whole PARAM arena cast to the
 * dtype (the master weights stay float32; see AMP WEIGHTS for when it is cast), and
 * each conv casts its float32 input to the dtype, runs kern's conv2d_lowp (float32 accumulation,
 * bias in the dtype for Detect) and widens its output into the usual float32 activation, so BN,
 * SiLU, pools, upsample, concat, the residual adds, Detect's reshape and the loss are float32 as
 * before. Backward casts the conv's float32 output gradient to the dtype, adds the float32
 * weight / bias gradients (each rounded to the dtype, as autocast's) into the grad arena, and
 * widens dx before writing or adding it as the float32 path does. fp16 gradients can overflow
 * to Inf: the trainer's loss scaler (trainer/train/amp.h) checks for that. The scratch (the cast
 * PARAM arena, one input, one output and one float32 dx of the largest conv) is allocated at
 * creation in the backend's memory and counted in trn_net_memory_bytes.
 *
 * AMP WEIGHTS. The cast of the PARAM arena (w16) is redone only when the parameters may have
 * changed, and a forward decides that from state the net keeps, as follows:
 *   - a net that does not track its parameters casts at every forward, as before: a CPU net (it
 *     reads the model's arena, which anyone may write), a non-resident device net (it uploads
 *     the host model at every forward), a net sharing another's parameters with another dtype;
 *     unless created with trn_net_opts.fixed_params;
 *   - a resident device net (RESIDENT) and a net created with trn_net_opts.fixed_params
 *     cast at a forward only when the cast is stale: after creation, trn_net_params_changed,
 *     trn_net_sync_model(KERN_COPY_H2D) and trn_net_set_resident. A net sharing another's
 *     parameters (trn_net_opts.share) with the same dtype shares its cast and that state.
 * Whoever writes the parameters of a tracking net other than through those calls must say so:
 * the device step hands trn_net_dev_params_lowp to the SGD op (trn_optim_dev_set_params_lowp,
 * kern_sgd.params_lowp), which rewrites the cast in the same pass, so it stays current; any
 * other write calls trn_net_params_changed before the next forward. A stale cast is a silent wrong
 * result, so when in doubt, call it. A step captured in a graph (kern_graph_capture) must not
 * decide at capture what a replay needs: call trn_net_lowp_refresh before each capture and replay
 * (it casts, on the net's stream, only when stale), so the captured forward finds the cast current
 * and records no cast, and the replay reads a cast made current outside it.
 *
 * THREADS. A net is used by one thread at a time; it writes the model's BN buffers (training
 * forward) and reads its parameters, so two nets on one model must not run at once. Ops may use
 * the kern context's worker threads (trn_net_opts.threads).
 */
#ifndef TRN_NET_H
#define TRN_NET_H

#include <stdbool.h>
#include <stddef.h>

#include "kern.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row's final parameter gradients (see GRADIENTS, gradient-ready hook). */
struct trn_net_grad_range {
    int layer;     /* yaml row */
    size_t offset; /* first float of the row's range in the PARAM arena layout */
    size_t count;  /* floats in the range (0 for a row without parameters) */
    float *host;   /* trn_net_grad(net) + offset: the final gradient in host memory (on the device
                      data path the range has just been copied to the host mirror) */
    float *dev;    /* device data path: the same range of the net's backend gradient arena (device
                      memory on CUDA), valid for the net's life; NULL on the CPU path */
    void *stream;  /* CUDA: the cudaStream_t (as void *) on which dev was produced; every write
                      to the range is enqueued there before the call. NULL otherwise */
};

/*
 * What runs trn_net_infer on the CPU (trn_net_opts.cpu_engine). The reference ops are the
 * bit-for-bit reference every other path is tested against. oneDNN (an optional dependency,
 * Debian's libdnnl-dev) runs the inference forward with BatchNorm folded into the convs, as
 * val.py fuses them, and the activations in its blocked layout (about 1.8x faster on AVX-512:
 * docs/benchmarks.md); its results differ from the reference's by float summation order, as
 * PyTorch's do (tests/trainer/test_net_onednn.c). An inference net (train false) runs
 * trn_net_infer and eval forwards on it (BN folded); a training net runs training forwards (BN
 * with batch statistics, running statistics moved as the reference moves them) and backward on
 * it (BN's gamma and beta read in place, every gradient added into the grad arena), and its eval
 * forwards and trn_net_infer on the reference ops; trn_net_forward_dev always runs the
 * reference ops (a backward follows the engine of the forward before it). A training net on
 * oneDNN has no image gradient (input_grad); its SyncBatchNorm and gradient-ready hooks are
 * called in the reference ops' sequence, so ranks on either engine work together.
 * After a oneDNN forward the view getters show the Detect convs' outputs as computed, every
 * other act as the last reference forward left it.
 */
enum trn_cpu_engine {
    TRN_CPU_ENGINE_REF = 0,    /* the reference ops (the default of trn_net_opts) */
    TRN_CPU_ENGINE_AUTO = 1,   /* oneDNN where the build has it, the net is on a CPU context in
                                  float32 (amp KERN_DT_F32, not device_path), oneDNN has JIT
                                  code for its convs and (training nets) input_grad is off;
                                  else the reference ops */
    TRN_CPU_ENGINE_ONEDNN = 2, /* oneDNN, or -ENOTSUP from trn_net_create where AUTO would not
                                  choose it */
};

/*
 * ACTIVATIONS of a training net's training forwards and backward (trn_net_opts.act_store; eval
 * forwards always run the float32 walk):
 *   - TRN_ACT_F32: float32 NCHW between layers; with AMP every conv casts its operands in and
 *     widens its output (the op-table walk). The default.
 *   - TRN_ACT_BF16_NHWC: bf16 channels-last between layers, as PyTorch's channels_last autocast
 *     step stores them: each conv writes bf16 (into its concat's channel slice where it feeds
 *     one), BN statistics, BN + SiLU (+ the residual), pools, upsample and the concats run on
 *     bf16 with float32 math (kern_bnx, kern_map16), the Detect head is widened for the loss,
 *     and the weights are cast once per forward into the convs' layout; weight gradients come
 *     back float32 in the model's order. Needs amp KERN_DT_BF16 and no input_grad (-EINVAL).
 *   - TRN_ACT_BF16_NCHW: the same in NCHW; on the CPU reference the two give the same bits,
 *     which is how the NHWC path is checked where no GPU is.
 */
enum trn_act_store {
    TRN_ACT_F32 = 0,
    TRN_ACT_BF16_NHWC = 1,
    TRN_ACT_BF16_NCHW = 2,
};

/* Options for trn_net_create. */
struct trn_net_opts {
    int threads;          /* threads of the kern context the net creates (kern_ctx_opts.threads:
                             0 or 1 = caller only, OpenBLAS then uses its own threads) */
    struct kern_ctx *ctx; /* borrowed CPU context to run on instead (threads then ignored); the
                             net reserves the conv workspace on it; must outlive the net */
    bool train;           /* true: allocate gradients so trn_net_backward works; false: an
                             inference-only net (no gradient memory) */
    bool input_grad;      /* with train: backward also computes d loss / d images */
    int device;           /* -1: the CPU reference ops; >= 0: the CUDA ops on that device (the
                             net creates a CUDA context; -KERN_EBACKEND where the build has no
                             CUDA or no device is visible). Ignored when ctx is given: the
                             borrowed context's backend decides. */
    bool device_path;     /* tests: on a CPU context, run the GPU net's data path anyway
                             (separate parameter and buffer copies, host mirrors, every copy
                             through kern_mem_copy) so that it is tested where no GPU is */
    /* SyncBatchNorm (see BATCH NORM): NULL for per-net batch statistics, or a function that
       sums buf[0..n) (host memory, KERN_BN_SUMS_LEN(c) doubles of one BN layer) elementwise
       over every rank in place, the same bytes on every rank, and returns 0 or a negative code
       (then the forward or backward stops and returns it). Called from the net's thread. */
    int (*bn_allreduce)(void *ctx, double *buf, size_t n);
    void *bn_allreduce_ctx; /* bn_allreduce's first argument (borrowed) */
    /* Gradient-ready hook (see GRADIENTS): NULL, or a function told of each row's final range,
       n_layers - 1 down to 0, during trn_net_backward (train nets only). g is valid for the call.
       A negative return stops the backward, which returns it. Called from the net's thread. On
       the device data path each range is copied to the host mirror before its call, and backward
       then skips its whole-arena copy (the hook's consumer may be writing the mirror). */
    int (*grad_ready)(void *ctx, const struct trn_net_grad_range *g);
    void *grad_ready_ctx;    /* grad_ready's first argument (borrowed) */
    bool any_algo;           /* device >= 0 without ctx: kern_ctx_opts.any_algo [false] */
    struct kern_plan *plans; /* device >= 0 without ctx: kern_ctx_opts.plans (borrowed) [NULL] */
    bool tune;               /* device >= 0 without ctx: kern_ctx_opts.tune [false] */
    struct trn_net *share;   /* NULL, or a net of the same model on the same borrowed context (ctx)
                                and data path, not itself sharing, that outlives this one: on the
                                device data path this net uses its device copies of the parameter
                                and buffer arenas instead of its own (the trainer's short last-batch
                                net beside the main one, both resident). -EINVAL otherwise */
    int amp; /* KERN_DT_F32 [default]: float32 throughout, bit for bit as before; KERN_DT_BF16 or
                KERN_DT_F16: autocast, see AUTOCAST. -EINVAL for another value */
    bool fixed_params; /* a net whose caller promises that the model's parameters change only
                          where it calls trn_net_params_changed (an inference runner over a model
                          that is read-only meanwhile): the AMP cast is then made once, not at
                          every forward (AMP WEIGHTS). On the device path (not resident) the
                          host model (parameters and buffers) is also uploaded once, at the first
                          inference forward and the first after trn_net_params_changed, instead of
                          at every forward (validation on a GPU) [false] */
    int cpu_engine;    /* enum trn_cpu_engine [TRN_CPU_ENGINE_REF] */
    int act_store;     /* enum trn_act_store (ACTIVATIONS) [TRN_ACT_F32] */
};

/* Fill o with the defaults: threads 0, no borrowed context, train true, input_grad false,
 * device -1 (CPU), amp KERN_DT_F32. */
void trn_net_opts_default(struct trn_net_opts *o);

struct trn_net;

/*
 * Create a network for model m at batch x ch x h x w: plans the activations once
 * (trn_model_plan) and allocates the activation arena, the activation- and parameter-gradient
 * arenas (opts->train), BN batch statistics, max-pool indices, the Detect output buffers, the
 * decode buffer and the conv workspace. Nothing is allocated per step afterwards.
 * m: borrowed, must outlive the net; its parameters are read and its BN buffers written at each
 * call, never cached. opts: NULL for the defaults. out: on success a new net (free with
 * trn_net_destroy); untouched on error. err/err_cap: a one-line message on failure (may be
 * NULL, 0). Returns 0, -EINVAL, -ENOMEM, -TRN_MODEL_ESHAPE, -TRN_MODEL_EUNSUPPORTED, or a kern
 * error from creating the context.
 */
int trn_net_create(struct trn_model *m, int batch, int h, int w, const struct trn_net_opts *opts,
                   struct trn_net **out, char *err, size_t err_cap);

/* Free a net and everything it allocated (never the model or a borrowed context). NULL ok. */
void trn_net_destroy(struct trn_net *net);

/* The activation plan the net was built on; valid for the net's life. */
const struct trn_act_plan *trn_net_plan(const struct trn_net *net);

/* Detection levels (the model's nl). */
int trn_net_levels(const struct trn_net *net);

/*
 * Shape of level l's Detect output into shape[5] = {bs, na, ny, nx, no}. Returns the element
 * count (> 0), or -EINVAL for a bad level.
 */
long trn_net_output_shape(const struct trn_net *net, int level, int shape[5]);

/*
 * Forward pass. images: batch x ch x h x w float NCHW (copied in; not kept). train: BN in
 * training mode (batch statistics, running stats updated; enables backward) or eval mode.
 * outputs: out, if not NULL, receives trn_net_levels() pointers to the raw Detect outputs
 * (bs, na, ny, nx, no) of each level (no sigmoid); views valid until the next forward on this
 * net. Returns 0, -EINVAL, or a kern error (the model's running stats may then be partly
 * updated).
 */
int trn_net_forward(struct trn_net *net, const float *images, bool train, const float **outputs);

/*
 * Backward pass of the last forward, which must have been a training forward on a train net
 * (else -EINVAL). d_outputs: trn_net_levels() gradients d loss / d output, each in the output's
 * (bs, na, ny, nx, no) layout (borrowed for the call). Adds (+=) d loss / d parameter into the
 * grad arena; with opts.input_grad also overwrites the input gradient. The activations are
 * left as the forward wrote them, so backward may be called again (gradients add up).
 * Returns 0, -EINVAL, or a kern error.
 */
int trn_net_backward(struct trn_net *net, const float *const *d_outputs);

/*
 * The training head in the oneDNN executor's own layout, for a loss that reads it there
 * (trn_loss_compute_blk; kern_yolo_loss.blk): on a training net on oneDNN, on makes every later
 * training forward leave each level's Detect output as its conv wrote it, (bs, ceil(na no / blk),
 * ny, nx, blk), and give those as trn_net_forward's outputs (the head views are then not
 * written); trn_net_raw_dhead names the buffers the loss writes the gradients into, and
 * trn_net_backward takes those and no others (-EINVAL). No reshape either way: the forward's and
 * the backward's took 9-10 ms of yolov5n's 260 ms step at 320 b16. Returns blk (16 or 8), or 0
 * where the net has no such layout (other engines, inference nets: the outputs stay
 * (bs, na, ny, nx, no)); off returns 0 and restores the usual head. The bf16 executor
 * (ACTIVATIONS) does the same with its Detect convs' bf16 outputs (the pointers cast from
 * uint16_t) and returns TRN_LOSS_HEAD_BF16_NCHW or _NHWC (loss.h: give it the loss's cfg.head).
 * They live in the net's backend memory: on a CUDA net trn_net_forward then refuses a training
 * forward (-EINVAL; trn_net_forward_dev gives them), and trn_net_backward takes them as they are.
 */
int trn_net_raw_head(struct trn_net *net, bool on);

/* With the raw head on: the gradients' buffers, trn_net_levels() of them, valid for the net's life
 * and read by trn_net_backward (the loss writes them in place). Returns the channel block (> 0),
 * or -EINVAL (off). */
int trn_net_raw_dhead(struct trn_net *net, float **dp);

/* Set the parameter grad arena to zero (padding included). No-op for an inference net. */
void trn_net_zero_grad(struct trn_net *net);

/*
 * The parameter grad arena: info->arena_len[TRN_ARENA_PARAM] floats in the TRN_ARENA_PARAM
 * layout; NULL for an inference net. Owned by the net, valid for its life; the caller may
 * read and write it (the optimizer clips and consumes it).
 */
float *trn_net_grad(struct trn_net *net);

/* What runs trn_net_infer: "reference", "oneDNN nChw16c" (with the activation layout), or
 * "CUDA". Static storage or the net's; valid for the net's life. */
const char *trn_net_engine(const struct trn_net *net);

/* True when the net runs on a CUDA context (see DEVICES). */
bool trn_net_on_device(const struct trn_net *net);

/* Bytes of tensor memory the net holds on its backend (device memory on CUDA): activations and
 * their gradients, parameter gradients, BN statistics, pool indices, outputs, the device copies
 * of the model's arenas, and the context's workspace. Host mirrors are not counted. */
size_t trn_net_memory_bytes(const struct trn_net *net);

/*
 * Forward pass with the outputs left in the backend's memory (RESIDENT). images: batch x ch x h x
 * w float NCHW (a training forward with the space-to-depth input on: that tensor, THE STEM'S
 * INPUT), host memory, or backend memory (device memory on CUDA, e.g. the loader's
 * trn_batch.device_images; ordered before the call on the net's stream) when images_dev; copied
 * in. outputs: as trn_net_forward's, but pointers to backend memory (the head arena, no host
 * copy); valid until the next forward. Returns as trn_net_forward.
 */
int trn_net_forward_dev(struct trn_net *net, const void *images, bool images_dev, bool train,
                        const float **outputs);

/*
 * Backward pass as trn_net_backward with d_outputs in the backend's memory (the loss's gradient
 * from trn_loss_compute_dev; no upload). Returns as trn_net_backward.
 */
int trn_net_backward_dev(struct trn_net *net, const float *const *d_outputs);

/* Make the device copies the master copies, or not (RESIDENT). No-op on a CPU net. Returns 0 or
 * -EINVAL (NULL). */
int trn_net_set_resident(struct trn_net *net, bool on);

/*
 * Whether training forwards add 1 to each BN layer's num_batches_tracked (the model's COUNT arena,
 * host memory) [on]. A training step captured in a graph (kern_graph_capture) and replayed runs the
 * device work only, not the host code: the trainer then turns counting off and adds every step
 * itself with trn_net_count_batches, so the counts are the same however the step ran. Returns 0
 * or -EINVAL (NULL).
 */
int trn_net_set_count(struct trn_net *net, bool on);

/* Add n (>= 0) to every BN layer's num_batches_tracked, as n training forwards would. Returns 0 or
 * -EINVAL. */
int trn_net_count_batches(struct trn_net *net, int64_t n);

/*
 * The input slot of the net's training forwards (batch x ch x h x w floats, or with the
 * space-to-depth input on that tensor; backend memory), valid for the net's life.
 * trn_net_forward_dev(net, trn_net_dev_input(net), true, ...) reads the batch where it is, with
 * no copy: a captured step uploads each batch there before its replay.
 */
void *trn_net_dev_input(struct trn_net *net);

/*
 * THE STEM'S INPUT. A training net on bf16 activations (ACTIVATIONS) whose 3-channel images feed
 * one 6x6 stride-2 pad-2 conv and nothing else (every YOLOv5) runs that conv as the 3x3 conv of
 * the images' 2x2 space-to-depth (kern_tensor.h), and can take its training batches already in
 * that layout: the bf16 tensor the GPU augmentation writes (kern_augment.h
 * KERN_AUG_BF16_S2D_*, the loader's TRN_PIXELS_BF16_S2D_*), so that its step casts nothing. The
 * results are the float32 images' bit for bit, since that tensor is their cast_f32_lowp_s2d.
 *
 * trn_net_s2d_input: the kern_augment.h dtype (KERN_AUG_BF16_S2D_NHWC or _NCHW, the
 * activations' layout) that a net of model m created at batch x 3 x h x w with opts o takes,
 * or -ENOTSUP: answered before the net exists, since the loader is made first.
 * trn_net_set_s2d_input(net, on): from then on (until turned off) a training forward's images
 * are that tensor, batch * kern_aug_image_bytes(dtype, h, w) bytes, and trn_net_dev_input is its
 * slot; eval forwards still take float32 NCHW. -ENOTSUP where trn_net_s2d_input says so,
 * -EINVAL for NULL.
 */
int trn_net_s2d_input(const struct trn_model *m, int h, int w, const struct trn_net_opts *o);
int trn_net_set_s2d_input(struct trn_net *net, bool on);

/* Whether the net is resident (false for a CPU net). */
bool trn_net_resident(const struct trn_net *net);

/*
 * The parameter (TRN_ARENA_PARAM) or buffer (TRN_ARENA_BUFFER) arena the ops read, in the
 * backend's memory: the device copy on the device data path (a sharing net's: the shared one),
 * the model's arena on a CPU net; NULL for another arena or NULL net. Valid for the net's life.
 */
float *trn_net_dev_arena(struct trn_net *net, enum trn_arena a);

/* The parameter grad arena in the backend's memory (PARAM layout; what backward adds into); the
 * same as trn_net_grad on a CPU net; NULL for an inference net. Valid for the net's life. */
float *trn_net_dev_grad(struct trn_net *net);

/* The kern context and table the net runs on (for the caller's own ops on its memory: the
 * device loss and optimizer). Borrowed, valid for the net's life. */
struct kern_ctx *trn_net_kern_ctx(const struct trn_net *net);
const struct kern_ops *trn_net_kern_ops(const struct trn_net *net);

/*
 * Copy the model's PARAM and BUFFER arenas to the device copies (dir KERN_COPY_H2D: resume,
 * loaded weights) or back (KERN_COPY_D2H: checkpoints, validation). No-op on a CPU net.
 * Returns 0, -EINVAL (NULL, bad dir) or a kern error.
 */
int trn_net_sync_model(struct trn_net *net, int dir);

/*
 * Copy the host mirror of the grad arena (trn_net_grad) to the backend's arena (KERN_COPY_H2D:
 * an all-reduce summed the mirror, or a resume restored it) or back (KERN_COPY_D2H). No-op on a
 * CPU net or an inference net. Returns 0, -EINVAL, or a kern error.
 */
int trn_net_sync_grad(struct trn_net *net, int dir);

/* --- wcast --- */

/*
 * The parameters of net changed (AMP WEIGHTS): the next forward (or trn_net_lowp_refresh) casts
 * them again. Call it after any write to the parameters of a net that tracks them other than
 * through the calls that keep the cast: the model's PARAM arena under a fixed_params net, the
 * device copy (trn_net_dev_arena) of a resident net by anything but an SGD step given
 * trn_net_dev_params_lowp. Harmless elsewhere. On a net sharing another's parameters it is the
 * owner's state that goes stale. Returns 0 or -EINVAL (NULL).
 */
int trn_net_params_changed(struct trn_net *net);

/*
 * The net's cast of the PARAM arena (backend memory, PARAM layout, 16-bit elements) that a step
 * updating trn_net_dev_arena(net, TRN_ARENA_PARAM) in place may rewrite in the same pass, so
 * that it stays current (trn_optim_dev_set_params_lowp / kern_sgd.params_lowp, with
 * *dtype as lowp_dtype). With bf16 activations (ACTIVATIONS) it is the training executor's own
 * copy instead, in the order trn_net_params_lowp_order gives: the step then keeps that one, and
 * the net's cast for eval forwards is recast at each of them. dtype: out (may be NULL),
 * KERN_DT_BF16 or KERN_DT_F16. Returns NULL when the net has no amp or casts into its own buffer
 * beside a share of another dtype (then pass no copy: the forward recasts). Valid for the net's
 * life (the owner's, for a sharing net).
 */
void *trn_net_dev_params_lowp(struct trn_net *net, int *dtype);

/*
 * The order of trn_net_dev_params_lowp's copy, per tensor of the model, for
 * trn_optim_dev_set_params_lowp: NULL, the PARAM arena's; else one struct kern_lowp_order per
 * tensor (kern_optim.h), all zero where the tensor keeps the PARAM order. The bf16 executor's
 * (ACTIVATIONS) stores its NHWC conv weights channels last, and the stem's weights (THE STEM) as
 * their 3x3 space-to-depth past the PARAM elements, in its layout: the step writes that copy
 * too, so no forward rearranges or casts them. Valid for the net's life.
 */
const struct kern_lowp_order *trn_net_params_lowp_order(struct trn_net *net);

/*
 * Make the cast of a tracking net current now: cast the PARAM arena if it is stale, enqueued on
 * the net's stream; nothing when current or when the net does not track (it casts at every
 * forward). Before capturing or replaying a step in a graph (see AMP WEIGHTS). Returns 0,
 * -EINVAL, or a kern error.
 */
int trn_net_lowp_refresh(struct trn_net *net);

/* Whole-arena casts of the parameters the net has run (forwards and refreshes; none without
 * amp): for tests and logs. 0 for NULL. */
int64_t trn_net_lowp_casts(const struct trn_net *net);

/* d loss / d images (batch x ch x h x w) from the last backward, or NULL unless the net was
 * created with input_grad. Valid until the next backward. */
const float *trn_net_input_grad(const struct trn_net *net);

/*
 * Row i's output from the last forward (for Detect: level 0's raw conv output, (bs, na*no,
 * ny, nx) with bias; use the forward's outputs for the permuted ones). shape: out, {n, c, h, w}
 * (may be NULL). Returns a view valid until the next forward, or NULL for a bad row.
 */
const float *trn_net_layer_output(const struct trn_net *net, int i, int shape[4]);

/* Activation a of the plan (trn_net_plan()->acts[a]) from the last forward, or NULL. The plan
 * has no BN-output (pre-SiLU) acts: BN and SiLU run fused. A shortcut
 * bottleneck's cv2 has no SiLU-output act at all (trn_act_conv.act -1): its forward writes
 * SiLU + input straight into the "...add" act. After an eval forward a conv with BN has no
 * conv-output act either (trn_act_conv.conv holds what it held before): the CPU runs conv, BN
 * and SiLU as one op whose conv output never leaves L2 (kern conv2d_bn_silu_fwd_eval). */
const float *trn_net_act(const struct trn_net *net, int a);

/*
 * Inference: an eval forward followed by the Detect decode (kern detect_decode), as
 * ultralytics' Detect in eval mode returns torch.cat(z, 1): *out (bs, rows, no) where rows =
 * sum over levels of na*ny*nx (level 0's anchors first), each row x, y, w, h in input pixels,
 * then objectness and class probabilities. out: a view valid until the next forward or infer.
 * The (bs, na, ny, nx, no) head trn_net_forward hands out is not written (the decode reads the
 * Detect convs' outputs): what it held before stays, stale.
 * rows: out, may be NULL. Returns 0, -EINVAL, or a kern error.
 */
int trn_net_infer(struct trn_net *net, const float *images, const float **out, int *rows);

#ifdef __cplusplus
}
#endif

#endif
