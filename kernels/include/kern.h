/*
 * kern: the tensor ops of the YOLOv5 trainer, forward and backward.
 *
 * Layer L1 (docs/design.md): includes nothing of this project. Every op has a CPU reference
 * (kern_ref_*, kernels/ref/, C + libm + OpenBLAS) and, later, a CUDA twin (kern_cuda_*,
 * kernels/cuda/) with exactly the same parameter list, so tests/kernels can run both on the same
 * inputs (style guide rule 25) and the trainer can call either through struct kern_ops.
 *
 * TENSORS. Dense float32, NCHW (batch, channels, height, width), row-major, no padding between
 * rows or planes. Shapes are given in small descriptor structs (struct kern_conv2d, ...) or as
 * explicit counts. For the CPU reference every pointer is host memory; for the CUDA twins every
 * tensor pointer is device memory (descriptors and the scalar outputs documented as "host" stay
 * on the host). The caller owns every buffer; no op keeps a pointer after it returns.
 *
 * ALIASING. Unless an op says otherwise, outputs must not overlap inputs (the prototypes carry
 * KERN_RESTRICT). Elementwise ops that say "may run in place" accept dst == src exactly (never a
 * partial overlap).
 *
 * GRADIENTS. Every backward op takes `unsigned accum`, a mask of KERN_ACCUM_* bits:
 *   KERN_ACCUM_DX     set: input gradients are added (dx += ...); clear: overwritten (dx = ...).
 *   KERN_ACCUM_DPARAM set: parameter gradients (dw, db, dgamma, dbeta) are added; clear:
 *                     overwritten.
 * With a bit clear the old contents are never read (they may be NaN). Accumulation lets a
 * tensor read by several consumers (C3 input, SPPF, residuals) collect its gradient in place,
 * and lets parameter gradients sum over micro-batches.
 *
 * ERRORS. Functions returning int give 0 on success and a negative code on failure: -EINVAL for
 * bad arguments (NULL pointers, non-positive or inconsistent shapes; nothing is written),
 * -KERN_EWORKSPACE when the context's workspace is too small, -KERN_EBACKEND when a context of
 * the wrong backend is passed, -ENOMEM when an allocation at setup fails. kern_strerror() names
 * every code. The library never prints, never exits, never allocates inside an op.
 *
 * THREADS. A struct kern_ctx is used by one thread at a time (its workspace and worker threads
 * are shared by the ops called on it); different contexts may be used concurrently. A CPU
 * context with kern_ctx_opts.threads = n > 1 owns n - 1 sleeping worker threads and splits each
 * large op over n (conv2d by images, BN by channels, elementwise ops by ranges; small ops stay
 * on the caller). Splits are static, so results are bitwise reproducible run to run for a given
 * thread count; between thread counts only conv2d may differ in the last bits (dw is summed from
 * per-thread partials, and GEMM blocking differs). With threads <= 1 every op runs on the
 * calling thread and the conv2d GEMMs use OpenBLAS's own threads.
 */
#ifndef KERN_H
#define KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define KERN_RESTRICT __restrict__
#else
#define KERN_RESTRICT restrict
#endif

#if defined(__GNUC__)
#define KERN_API __attribute__((visibility("default")))
#else
#define KERN_API
#endif

/* Error codes of this library, returned negated. Above every errno value; pinned once released. */
enum {
    KERN_EWORKSPACE = 2001, /* the context's workspace is smaller than the op needs */
    KERN_EBACKEND = 2002,   /* the context belongs to another backend (or it is not built) */
};

/* Returns a static, human-readable description of rc (any negative code, errno or KERN_E*). */
KERN_API const char *kern_strerror(int rc);

/* Bits of the `accum` argument of backward ops (see GRADIENTS above). */
#define KERN_ACCUM_DX     1u
#define KERN_ACCUM_DPARAM 2u

/* YOLOv5 constants (recipe S2, S3): BatchNorm2d eps and momentum, CIoU eps. */
#define KERN_BN_EPS      1e-3f
#define KERN_BN_MOMENTUM 0.03f
#define KERN_CIOU_EPS    1e-7f

/* ---------------------------------------------------------------------------------------- */
/* Context: backend, threads, workspace                                                     */

enum { KERN_BACKEND_CPU = 0, KERN_BACKEND_CUDA = 1 };

struct kern_ctx;

struct kern_ctx_opts {
    int backend;           /* KERN_BACKEND_CPU (kern_ref_*) or KERN_BACKEND_CUDA (kern_cuda_*) */
    int threads;           /* CPU: threads per op, caller included (0, 1: caller only; > 1 sets
                              OpenBLAS to one thread, process-wide, so the pools do not fight) */
    int device;            /* CUDA: device ordinal; ignored on CPU */
    void *workspace;       /* borrowed scratch (device memory for CUDA), or NULL for none yet */
    size_t workspace_size; /* bytes at workspace; 0 when workspace is NULL */
};

/* Fills *o with the defaults: CPU backend, threads 0 (caller only), device 0, no workspace. */
KERN_API void kern_ctx_opts_default(struct kern_ctx_opts *o);

/*
 * Creates a context (and, for threads > 1, its worker threads). opts may be NULL for the defaults.
 * The workspace in opts, if any, is borrowed: it must stay valid and unused by others until
 * kern_ctx_destroy or until replaced by kern_ctx_set_workspace. On success *out owns the new
 * context; returns 0. Errors: -EINVAL (bad options, threads > 256), -KERN_EBACKEND (backend not
 * built into this library), -ENOMEM, -EAGAIN (a worker thread could not be started).
 */
KERN_API int kern_ctx_create(const struct kern_ctx_opts *opts, struct kern_ctx **out);

/* Destroys ctx and frees the workspace it owns (never a borrowed one). Accepts NULL. */
KERN_API void kern_ctx_destroy(struct kern_ctx *ctx);

/* Returns the backend of ctx (KERN_BACKEND_*), or -EINVAL for NULL. */
KERN_API int kern_ctx_backend(const struct kern_ctx *ctx);

/*
 * Makes sure ctx has at least `bytes` of workspace, allocating a context-owned buffer if the
 * current one is smaller (a borrowed buffer is then dropped, not freed). Call it at setup with
 * the maximum over all layers of kern_*_conv2d_workspace_size; ops never allocate.
 * Invalidates nothing the caller holds. Errors: -EINVAL, -ENOMEM (the old workspace is kept).
 */
KERN_API int kern_ctx_reserve(struct kern_ctx *ctx, size_t bytes);

/*
 * Replaces the workspace with a borrowed buffer of `bytes` (NULL, 0 for none); frees a
 * context-owned one. The buffer must be 16-byte aligned and stay valid while ctx uses it.
 * Errors: -EINVAL (NULL ctx, misaligned buffer, or NULL with bytes > 0).
 */
KERN_API int kern_ctx_set_workspace(struct kern_ctx *ctx, void *buf, size_t bytes);

/* Returns the workspace size of ctx in bytes (0 for NULL). */
KERN_API size_t kern_ctx_workspace_size(const struct kern_ctx *ctx);

/*
 * Tensor memory of ctx's backend, so that a caller (the trainer's net) plans its arenas once and
 * runs unchanged on either backend: host memory (64-byte aligned) for CPU contexts, device memory
 * (cudaMalloc, 256-byte aligned) for CUDA contexts.
 *
 * kern_mem_alloc: *out receives `bytes` of zeroed memory owned by the caller (free with
 * kern_mem_free on a context of the same backend and device). bytes 0 gives NULL and 0.
 * Errors: -EINVAL (NULL ctx or out), -ENOMEM, -KERN_EBACKEND.
 * kern_mem_free: frees p (NULL ok). Waits for ctx's enqueued work first on CUDA.
 * kern_mem_copy: copies bytes between memory of the directions' kinds (KERN_COPY_*). CPU
 * contexts take every direction as host-to-host. On CUDA, host-to-device and device-to-device
 * copies are enqueued on ctx's stream (the host source may be reused at once: it is staged),
 * device-to-host waits, so the host may read dst when it returns. Errors: -EINVAL, -EIO.
 * kern_mem_zero: zeroes bytes at p (ctx's kind of memory), enqueued on CUDA. Errors: -EINVAL,
 * -EIO.
 */
enum { KERN_COPY_H2D = 1, KERN_COPY_D2H = 2, KERN_COPY_D2D = 3 };
KERN_API int kern_mem_alloc(struct kern_ctx *ctx, size_t bytes, void **out);
KERN_API void kern_mem_free(struct kern_ctx *ctx, void *p);
KERN_API int kern_mem_copy(struct kern_ctx *ctx, void *dst, const void *src, size_t bytes, int dir);
KERN_API int kern_mem_zero(struct kern_ctx *ctx, void *p, size_t bytes);

/* ---------------------------------------------------------------------------------------- */
/* conv2d: groups 1, dilation 1, no bias except where given                                 */

/*
 * x  (n, c_in, h_in, w_in)            input
 * w  (c_out, c_in, k_h, k_w)          weights (PyTorch Conv2d layout)
 * b  (c_out)                          optional bias (Detect's 1x1 convs)
 * y  (n, c_out, h_out, w_out)         h_out = (h_in + 2 pad_h - k_h) / stride_h + 1 (floor)
 */
struct kern_conv2d {
    int n;                  /* batch size, >= 1 */
    int c_in, h_in, w_in;   /* input channels and spatial size, >= 1 */
    int c_out;              /* output channels, >= 1 */
    int k_h, k_w;           /* kernel size, >= 1 */
    int stride_h, stride_w; /* stride, >= 1 */
    int pad_h, pad_w;       /* zero padding on each side, >= 0 */
};

/* Fills *d for a square kernel, stride and padding (the YOLOv5 case). */
KERN_API void kern_conv2d_init(struct kern_conv2d *d, int n, int c_in, int h_in, int w_in,
                               int c_out, int k, int stride, int pad);

/* Computes the output size into *h_out, *w_out. Errors: -EINVAL (bad or empty shape). */
KERN_API int kern_conv2d_out_hw(const struct kern_conv2d *d, int *h_out, int *w_out);

/* FLOPs of one forward pass (2 per multiply-add); backward data and filter cost the same each. */
KERN_API double kern_conv2d_flops(const struct kern_conv2d *d);

/*
 * Bytes of workspace that kern_ref_conv2d_fwd/_bwd_data/_bwd_filter need for shape d on ctx
 * (the max of the three) into *bytes: per thread that gets images, c_in k_h k_w h_out w_out
 * floats (none for 1x1 stride-1 unpadded convs), c_in h_in w_in floats more for strided convs,
 * and c_out c_in k_h k_w floats of partial dw when threaded. Depends on the context's thread
 * count. Errors: -EINVAL.
 */
KERN_API int kern_ref_conv2d_workspace_size(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                            size_t *bytes);

/* y = conv(x, w) (+ bias[c_out] when bias != NULL). y is overwritten. */
KERN_API int kern_ref_conv2d_fwd(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                 float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                 const float *KERN_RESTRICT w, const float *KERN_RESTRICT bias);

/* dx (=|+=) dL/dx given dy (n, c_out, h_out, w_out) and w. Uses KERN_ACCUM_DX. */
KERN_API int kern_ref_conv2d_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                      float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                      const float *KERN_RESTRICT w, unsigned accum);

/* dw (=|+=) dL/dw, summed over the batch, given dy and x. Uses KERN_ACCUM_DPARAM. */
KERN_API int kern_ref_conv2d_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                        float *KERN_RESTRICT dw, const float *KERN_RESTRICT dy,
                                        const float *KERN_RESTRICT x, unsigned accum);

/* db[c_out] (=|+=) sum of dy over n, h, w. Uses KERN_ACCUM_DPARAM. */
KERN_API int kern_ref_conv2d_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d *d,
                                      float *KERN_RESTRICT db, const float *KERN_RESTRICT dy,
                                      unsigned accum);

/* ---------------------------------------------------------------------------------------- */
/* Batch norm (BatchNorm2d), SiLU, and the two fused                                        */

/*
 * x, y, dx, dy  (n, c, hw)   hw = height * width of each plane
 * gamma, beta, running_mean, running_var, save_mean, save_invstd, dgamma, dbeta  (c)
 *
 * Training: mean and biased variance over (n, hw) normalise x; y = (x - mean) * invstd * gamma +
 * beta with invstd = 1 / sqrt(var + eps). The running stats become (1 - momentum) * running +
 * momentum * batch stat, with the unbiased variance var * N / (N - 1), N = n * hw (N must be
 * > 1, as in PyTorch). save_mean and save_invstd keep the batch mean and invstd for backward.
 * Eval: running_mean and running_var normalise x; nothing is updated.
 * Statistics are accumulated in double on the CPU.
 */
struct kern_bn {
    int n;          /* batch size, >= 1 */
    int c;          /* channels, >= 1 */
    int hw;         /* elements per plane (height * width), >= 1 */
    float eps;      /* added to the variance; KERN_BN_EPS for YOLOv5 */
    float momentum; /* running-stat update weight; KERN_BN_MOMENTUM for YOLOv5 */
};

/* Fills *d with the shape and the YOLOv5 eps (1e-3) and momentum (0.03). */
KERN_API void kern_bn_init(struct kern_bn *d, int n, int c, int hw);

/*
 * Training forward. y (overwritten); save_mean, save_invstd (overwritten; either may be NULL
 * when no backward follows); running_mean, running_var (updated in place; both NULL to skip the
 * update). Errors: -EINVAL (also for N = n * hw < 2 when the running stats are updated).
 */
KERN_API int kern_ref_bn_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                                   float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                                   float *KERN_RESTRICT save_invstd,
                                   float *KERN_RESTRICT running_mean,
                                   float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                                   const float *KERN_RESTRICT gamma,
                                   const float *KERN_RESTRICT beta);

/* Eval forward: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta. */
KERN_API int kern_ref_bn_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                  float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                  const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                                  const float *KERN_RESTRICT running_mean,
                                  const float *KERN_RESTRICT running_var);

/*
 * Training backward (batch statistics, as PyTorch in train mode). dx uses KERN_ACCUM_DX; dgamma
 * and dbeta use KERN_ACCUM_DPARAM; dgamma and dbeta may both be NULL (frozen BN: only dx).
 * save_mean and save_invstd come from the forward call on the same x.
 */
KERN_API int kern_ref_bn_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
                             float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta,
                             const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x,
                             const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT save_mean,
                             const float *KERN_RESTRICT save_invstd, unsigned accum);

/* SiLU forward over count elements: y = x * sigmoid(x). May run in place (y == x). */
KERN_API int kern_ref_silu_fwd(struct kern_ctx *ctx, float *y, const float *x, size_t count);

/*
 * SiLU backward: dx (=|+=) dy * s * (1 + x * (1 - s)), s = sigmoid(x), from the SiLU input x.
 * Uses KERN_ACCUM_DX. dx may equal dy (in place, only without KERN_ACCUM_DX).
 */
KERN_API int kern_ref_silu_bwd(struct kern_ctx *ctx, float *dx, const float *dy,
                               const float *KERN_RESTRICT x, size_t count, unsigned accum);

/*
 * Fused BN (training) + SiLU: y = silu(bn(x)); same arguments and updates as
 * kern_ref_bn_fwd_train. The BN output is not stored: the backward recomputes it from x.
 */
KERN_API int
kern_ref_bn_silu_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                           float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                           float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                           const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                           const float *KERN_RESTRICT beta);

/* Fused BN (eval) + SiLU: y = silu(bn_eval(x)). */
KERN_API int kern_ref_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                       float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                       const float *KERN_RESTRICT gamma,
                                       const float *KERN_RESTRICT beta,
                                       const float *KERN_RESTRICT running_mean,
                                       const float *KERN_RESTRICT running_var);

/*
 * Backward of kern_ref_bn_silu_fwd_train, given dy = dL/dy of the SiLU output and the BN input
 * x (beta is needed to recompute the SiLU input). Gradients as in kern_ref_bn_bwd.
 */
KERN_API int kern_ref_bn_silu_bwd(struct kern_ctx *ctx, const struct kern_bn *d,
                                  float *KERN_RESTRICT dx, float *KERN_RESTRICT dgamma,
                                  float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                                  const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                  const float *KERN_RESTRICT beta,
                                  const float *KERN_RESTRICT save_mean,
                                  const float *KERN_RESTRICT save_invstd, unsigned accum);

/* ---------------------------------------------------------------------------------------- */
/* Max pool 2d, nearest upsample x2                                                         */

/*
 * x (n, c, h_in, w_in) -> y, idx (n, c, h_out, w_out), h_out = (h_in + 2 pad - k) / stride + 1
 * (floor, PyTorch's ceil_mode=False). Padding is -inf (never selected), pad <= k / 2 as PyTorch
 * requires. idx holds the argmax as an offset into its input plane (ih * w_in + iw), PyTorch's
 * convention; ties keep the first maximum in row-major window order, and a NaN wins.
 */
struct kern_pool2d {
    int n, c;       /* batch size and channels, >= 1 */
    int h_in, w_in; /* input plane, >= 1 */
    int k;          /* square window, >= 1 */
    int stride;     /* >= 1 */
    int pad;        /* 0 <= pad <= k / 2 */
};

/* Computes the output size. Errors: -EINVAL (bad or empty shape). */
KERN_API int kern_pool2d_out_hw(const struct kern_pool2d *d, int *h_out, int *w_out);

/* y = maxpool(x); idx (overwritten) may be NULL when no backward follows. */
KERN_API int kern_ref_maxpool2d_fwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                                    float *KERN_RESTRICT y, int32_t *KERN_RESTRICT idx,
                                    const float *KERN_RESTRICT x);

/* dx (=|+=) dy routed to idx (overlapping windows add up). Uses KERN_ACCUM_DX. */
KERN_API int kern_ref_maxpool2d_bwd(struct kern_ctx *ctx, const struct kern_pool2d *d,
                                    float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                    const int32_t *KERN_RESTRICT idx, unsigned accum);

/* Nearest x2: x (planes, h, w) -> y (planes, 2h, 2w), y[oy][ox] = x[oy/2][ox/2]; planes = n*c. */
KERN_API int kern_ref_upsample2x_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                     const float *KERN_RESTRICT x, int planes, int h, int w);

/* dx (planes, h, w) (=|+=) the sum of the 2x2 block of dy (planes, 2h, 2w). KERN_ACCUM_DX. */
KERN_API int kern_ref_upsample2x_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                     const float *KERN_RESTRICT dy, int planes, int h, int w,
                                     unsigned accum);

/* ---------------------------------------------------------------------------------------- */
/* Concat along channels, residual add                                                      */

/*
 * Concat is done one input at a time, as a channel-slice copy: x (n, c_x, hw) goes to channels
 * [c_off, c_off + c_x) of y (n, c_y, hw). Calling it for each input of a Concat layer, with
 * c_off the running sum of the channels before it, builds torch.cat(xs, dim=1). Channels of y
 * outside the slice are not touched.
 */
KERN_API int kern_ref_concat_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                 const float *KERN_RESTRICT x, int n, int c_x, int hw, int c_y,
                                 int c_off);

/* dx (n, c_x, hw) (=|+=) channels [c_off, c_off + c_x) of dy (n, c_y, hw). KERN_ACCUM_DX. */
KERN_API int kern_ref_concat_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                 const float *KERN_RESTRICT dy, int n, int c_x, int hw, int c_y,
                                 int c_off, unsigned accum);

/* Residual add over count elements: y = a + b. May run in place (y == a or y == b). */
KERN_API int kern_ref_add_fwd(struct kern_ctx *ctx, float *y, const float *a, const float *b,
                              size_t count);

/*
 * Backward of y = a + b for one of the two inputs: dx (=|+=) dy. Call it once for a and once
 * for b (or pass dy on when a gradient buffer can be shared). KERN_ACCUM_DX.
 */
KERN_API int kern_ref_add_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                              const float *KERN_RESTRICT dy, size_t count, unsigned accum);

/* ---------------------------------------------------------------------------------------- */
/* Detect head                                                                              */

/*
 * raw (bs, na*no, ny, nx)       the output of a Detect 1x1 conv, channel = a*no + k
 * p   (bs, na, ny, nx, no)      PyTorch's view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2)
 * k: 0-1 xy, 2-3 wh, 4 objectness, 5.. classes (no = nc + 5).
 */
struct kern_detect {
    int bs;       /* batch size, >= 1 */
    int na;       /* anchors per cell (3), >= 1 */
    int no;       /* outputs per anchor, nc + 5, >= 5 */
    int ny, nx;   /* grid size, >= 1 */
    float stride; /* pixels per grid cell (8, 16, 32) */
};

/* p = permute(raw) (overwritten). */
KERN_API int kern_ref_detect_reshape_fwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                         float *KERN_RESTRICT p, const float *KERN_RESTRICT raw);

/* draw (=|+=) the inverse permutation of dp. KERN_ACCUM_DX. */
KERN_API int kern_ref_detect_reshape_bwd(struct kern_ctx *ctx, const struct kern_detect *d,
                                         float *KERN_RESTRICT draw, const float *KERN_RESTRICT dp,
                                         unsigned accum);

/*
 * Inference decode, with the permute fused: reads raw (bs, na*no, ny, nx), writes out
 * (bs, na, ny, nx, no) = (bs, na*ny*nx, no) boxes in input pixels, as ultralytics' Detect in
 * eval mode: s = sigmoid(v); xy = (2 s + (grid - 0.5)) * stride; wh = (2 s)^2 * anchor * stride;
 * objectness and classes = s. anchors (host or device like the tensors): na (w, h) pairs in grid
 * units (pixels / stride), as the model stores them.
 */
KERN_API int kern_ref_detect_decode(struct kern_ctx *ctx, const struct kern_detect *d,
                                    float *KERN_RESTRICT out, const float *KERN_RESTRICT raw,
                                    const float *KERN_RESTRICT anchors);

/* ---------------------------------------------------------------------------------------- */
/* Losses: BCE with logits, CIoU                                                            */

/*
 * BCE-with-logits, mean reduction, pos_weight 1, over a rows x cols block: element (r, c) of
 * the logits is x[r * ldx + c] (ldx >= cols lets the block be the class or objectness columns
 * of (.., no) rows), and its target t[r * cols + c] (dense). Per element, numerically stable:
 * max(x, 0) - x t + log1p(exp(-|x|)). *loss (host) = sum / (rows * cols), summed in double.
 */
KERN_API int kern_ref_bce_logits_fwd(struct kern_ctx *ctx, float *loss,
                                     const float *KERN_RESTRICT x, const float *KERN_RESTRICT t,
                                     size_t rows, size_t cols, size_t ldx);

/*
 * dx[r * ldx + c] (=|+=) dloss * (sigmoid(x) - t) / (rows * cols); dx has x's layout, and its
 * elements outside the block are not touched. dloss (host) is dL/dloss. KERN_ACCUM_DX.
 */
KERN_API int kern_ref_bce_logits_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                     const float *KERN_RESTRICT x, const float *KERN_RESTRICT t,
                                     size_t rows, size_t cols, size_t ldx, float dloss,
                                     unsigned accum);

/*
 * Complete IoU of n box pairs, as ultralytics' bbox_iou(box1, box2, xywh=True, CIoU=True):
 * b1, b2 (n, 4) as (x_centre, y_centre, w, h), any consistent unit (b1 the prediction, b2 the
 * target); ciou (n) (overwritten). eps = KERN_CIOU_EPS in the union and in c^2 only;
 * v = 4/pi^2 (atan(w2/h2) - atan(w1/h1))^2; alpha = v / (v - iou + 1 + eps).
 */
KERN_API int kern_ref_ciou_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT ciou,
                               const float *KERN_RESTRICT b1, const float *KERN_RESTRICT b2,
                               size_t n);

/*
 * Backward of kern_ref_ciou_fwd, with alpha a constant (no gradient through it, as PyTorch's
 * no_grad block). db1, db2 (n, 4) (=|+=) dciou[i] * dCIoU_i/db; db2 may be NULL (targets need
 * none). Ties of min/max split the gradient in halves and clamp(0) passes it at 0, as autograd.
 * KERN_ACCUM_DX.
 */
KERN_API int kern_ref_ciou_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT db1,
                               float *KERN_RESTRICT db2, const float *KERN_RESTRICT dciou,
                               const float *KERN_RESTRICT b1, const float *KERN_RESTRICT b2,
                               size_t n, unsigned accum);

/* ---------------------------------------------------------------------------------------- */
/* Batch norm in phases, for SyncBatchNorm                                                  */

/*
 * The training BN and BN+SiLU above, split where a data-parallel caller sums per-channel
 * statistics over its ranks, as PyTorch's SyncBatchNorm does:
 *
 *   forward:  kern_ref_bn_stats(x) -> sums;  sum sums over the ranks;
 *             kern_ref_bn[_silu]_fwd_apply(sums) -> y, save_mean, save_invstd, running stats
 *   backward: kern_ref_bn[_silu]_bwd_reduce(dy) -> sums, dgamma, dbeta;  sum sums over the ranks;
 *             kern_ref_bn[_silu]_bwd_apply(sums) -> dx
 *
 * SUMS. KERN_BN_SUMS_LEN(c) = 2c + 1 doubles of the backend's tensor memory (device memory for
 * CUDA): sums[0..c) and sums[c..2c) hold two per-channel sums and sums[2c] the number of
 * elements per channel they cover (n * hw on one rank). The caller adds the ranks' buffers
 * elementwise (any order, any transport), so the apply ops read the global sums AND the global
 * count N: ranks may hold different batch sizes. Without the sum (one rank) the phases compute
 * what kern_ref_bn[_silu]_fwd_train and _bwd compute, up to rounding.
 *   kern_ref_bn_stats:         (sum x, sum x^2, n hw)
 *   kern_ref_bn*_bwd_reduce:   (sum dz, sum dz xhat, n hw), dz = dy for BN, dy silu'(z) for
 *                              BN+SiLU (z = xhat gamma + beta recomputed), xhat = (x -
 *                              save_mean) save_invstd
 * WHY DOUBLE. The forward needs a sum it can add over ranks, so the variance comes back as
 * E[x^2] - mean^2 after the sum, which cancels when |mean| >> std: in float pairs the relative
 * error of the variance would be about 6e-8 (mean / std)^2 (1e-4 at mean = 40 std); in double it
 * is 1e-16 (mean / std)^2, negligible below mean = 1e4 std (the bound the CUDA BN forward already
 * has). Locally each rank still computes its channel mean and sum of squared deviations as the
 * fused op does (two-level, Chan's merge) and only then forms sum x^2 = M2 + N mean^2, so no
 * float sum of squares is ever formed. Backends need float64 sums: TCP, MPI and NCCL all have
 * them; the buffers are 2c + 1 values per layer, never the activations.
 *
 * FORWARD APPLY. mean = sums[ch] / N, var = max(sums[c + ch] / N - mean^2, 0) (biased) and
 * invstd = 1 / sqrt(var + eps) normalise x; save_mean, save_invstd receive them (for backward;
 * either may be NULL); running_mean, running_var (both or neither) are updated with momentum and
 * the UNBIASED global variance var N / (N - 1), as SyncBatchNorm's
 * batch_norm_gather_stats_with_counts.
 * BACKWARD. bwd_reduce writes this rank's sums, and dgamma = sum dz xhat, dbeta = sum dz of THIS
 * rank's batch (=|+= by KERN_ACCUM_DPARAM; both may be NULL): parameter gradients stay local,
 * as in SyncBatchNorm, and the data-parallel gradient all-reduce sums them like every other
 * parameter's. bwd_apply: dx (=|+= by KERN_ACCUM_DX) = gamma invstd (dz - sum dz / N - xhat
 * sum(dz xhat) / N) with the reduced sums and N.
 * The BN and BN+SiLU variants of each phase have the same parameter list. In the backward
 * phases beta is read only by the BN+SiLU ones (it may be NULL for plain BN), and gamma by every
 * one but kern_ref_bn_bwd_reduce (NULL allowed there).
 * save_mean and save_invstd given to the backward phases come from the forward apply on the
 * same x.
 * Errors: -EINVAL as the fused ops (bad shape, NULL tensors, a local n * hw < 2 when running
 * stats are updated). The summed values are not checked (on CUDA they are in device memory):
 * the count must be >= 1, and >= 2 when running stats are updated.
 */
#define KERN_BN_SUMS_LEN(c) (2u * (size_t)(c) + 1u)

/* Forward phase 1: sums (KERN_BN_SUMS_LEN(d->c), overwritten) = (sum x, sum x^2, n hw). */
KERN_API int kern_ref_bn_stats(struct kern_ctx *ctx, const struct kern_bn *d,
                               double *KERN_RESTRICT sums, const float *KERN_RESTRICT x);

/* Forward phase 2: y = bn(x) with the summed statistics (see FORWARD APPLY). */
KERN_API int
kern_ref_bn_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                      float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                      float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                      const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                      const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums);

/* Forward phase 2 with SiLU: y = silu(bn(x)); as kern_ref_bn_fwd_apply. */
KERN_API int
kern_ref_bn_silu_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT y,
                           float *KERN_RESTRICT save_mean, float *KERN_RESTRICT save_invstd,
                           float *KERN_RESTRICT running_mean, float *KERN_RESTRICT running_var,
                           const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                           const float *KERN_RESTRICT beta, const double *KERN_RESTRICT sums);

/* Backward phase 1 (BN): sums = (sum dy, sum dy xhat, n hw); local dgamma, dbeta. */
KERN_API int kern_ref_bn_bwd_reduce(struct kern_ctx *ctx, const struct kern_bn *d,
                                    double *KERN_RESTRICT sums, float *KERN_RESTRICT dgamma,
                                    float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
                                    const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                    const float *KERN_RESTRICT beta,
                                    const float *KERN_RESTRICT save_mean,
                                    const float *KERN_RESTRICT save_invstd, unsigned accum);

/* Backward phase 1 (BN+SiLU, dy the gradient of the SiLU output): as above with dz. */
KERN_API int kern_ref_bn_silu_bwd_reduce(
    struct kern_ctx *ctx, const struct kern_bn *d, double *KERN_RESTRICT sums,
    float *KERN_RESTRICT dgamma, float *KERN_RESTRICT dbeta, const float *KERN_RESTRICT dy,
    const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
    const float *KERN_RESTRICT save_mean, const float *KERN_RESTRICT save_invstd, unsigned accum);

/* Backward phase 2 (BN): dx from the summed (sum dy, sum dy xhat, N). KERN_ACCUM_DX. */
KERN_API int kern_ref_bn_bwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                                   float *KERN_RESTRICT dx, const float *KERN_RESTRICT dy,
                                   const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
                                   const float *KERN_RESTRICT beta,
                                   const float *KERN_RESTRICT save_mean,
                                   const float *KERN_RESTRICT save_invstd,
                                   const double *KERN_RESTRICT sums, unsigned accum);

/* Backward phase 2 (BN+SiLU): dx from the summed (sum dz, sum dz xhat, N). KERN_ACCUM_DX. */
KERN_API int kern_ref_bn_silu_bwd_apply(
    struct kern_ctx *ctx, const struct kern_bn *d, float *KERN_RESTRICT dx,
    const float *KERN_RESTRICT dy, const float *KERN_RESTRICT x, const float *KERN_RESTRICT gamma,
    const float *KERN_RESTRICT beta, const float *KERN_RESTRICT save_mean,
    const float *KERN_RESTRICT save_invstd, const double *KERN_RESTRICT sums, unsigned accum);

/* --- optim --- */

/* --- yololoss --- */

/* --- augment --- */

/* ---------------------------------------------------------------------------------------- */
/* Backend table                                                                            */

/*
 * One member per op, with the kern_ref_* parameter lists, so that the trainer runs unchanged on
 * either backend: `const struct kern_ops *K = kern_ops_ref(); K->conv2d_fwd(ctx, ...)`. The CUDA
 * backend supplies kern_ops_cuda() with the kern_cuda_* twins. A table is immutable and static.
 */
struct kern_ops {
    int backend; /* KERN_BACKEND_* whose contexts these functions need */
    int (*conv2d_workspace_size)(struct kern_ctx *, const struct kern_conv2d *, size_t *);
    int (*conv2d_fwd)(struct kern_ctx *, const struct kern_conv2d *, float *, const float *,
                      const float *, const float *);
    int (*conv2d_bwd_data)(struct kern_ctx *, const struct kern_conv2d *, float *, const float *,
                           const float *, unsigned);
    int (*conv2d_bwd_filter)(struct kern_ctx *, const struct kern_conv2d *, float *, const float *,
                             const float *, unsigned);
    int (*conv2d_bwd_bias)(struct kern_ctx *, const struct kern_conv2d *, float *, const float *,
                           unsigned);
    int (*bn_fwd_train)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                        float *, float *, const float *, const float *, const float *);
    int (*bn_fwd_eval)(struct kern_ctx *, const struct kern_bn *, float *, const float *,
                       const float *, const float *, const float *, const float *);
    int (*bn_bwd)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                  const float *, const float *, const float *, const float *, const float *,
                  unsigned);
    int (*silu_fwd)(struct kern_ctx *, float *, const float *, size_t);
    int (*silu_bwd)(struct kern_ctx *, float *, const float *, const float *, size_t, unsigned);
    int (*bn_silu_fwd_train)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                             float *, float *, const float *, const float *, const float *);
    int (*bn_silu_fwd_eval)(struct kern_ctx *, const struct kern_bn *, float *, const float *,
                            const float *, const float *, const float *, const float *);
    int (*bn_silu_bwd)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                       const float *, const float *, const float *, const float *, const float *,
                       const float *, unsigned);
    int (*maxpool2d_fwd)(struct kern_ctx *, const struct kern_pool2d *, float *, int32_t *,
                         const float *);
    int (*maxpool2d_bwd)(struct kern_ctx *, const struct kern_pool2d *, float *, const float *,
                         const int32_t *, unsigned);
    int (*upsample2x_fwd)(struct kern_ctx *, float *, const float *, int, int, int);
    int (*upsample2x_bwd)(struct kern_ctx *, float *, const float *, int, int, int, unsigned);
    int (*concat_fwd)(struct kern_ctx *, float *, const float *, int, int, int, int, int);
    int (*concat_bwd)(struct kern_ctx *, float *, const float *, int, int, int, int, int, unsigned);
    int (*add_fwd)(struct kern_ctx *, float *, const float *, const float *, size_t);
    int (*add_bwd)(struct kern_ctx *, float *, const float *, size_t, unsigned);
    int (*detect_reshape_fwd)(struct kern_ctx *, const struct kern_detect *, float *,
                              const float *);
    int (*detect_reshape_bwd)(struct kern_ctx *, const struct kern_detect *, float *, const float *,
                              unsigned);
    int (*detect_decode)(struct kern_ctx *, const struct kern_detect *, float *, const float *,
                         const float *);
    int (*bce_logits_fwd)(struct kern_ctx *, float *, const float *, const float *, size_t, size_t,
                          size_t);
    int (*bce_logits_bwd)(struct kern_ctx *, float *, const float *, const float *, size_t, size_t,
                          size_t, float, unsigned);
    int (*ciou_fwd)(struct kern_ctx *, float *, const float *, const float *, size_t);
    int (*ciou_bwd)(struct kern_ctx *, float *, float *, const float *, const float *,
                    const float *, size_t, unsigned);
    /* Batch norm in phases (SyncBatchNorm); appended so that older initialisers stay valid. */
    int (*bn_stats)(struct kern_ctx *, const struct kern_bn *, double *, const float *);
    int (*bn_fwd_apply)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                        float *, float *, const float *, const float *, const float *,
                        const double *);
    int (*bn_silu_fwd_apply)(struct kern_ctx *, const struct kern_bn *, float *, float *, float *,
                             float *, float *, const float *, const float *, const float *,
                             const double *);
    int (*bn_bwd_reduce)(struct kern_ctx *, const struct kern_bn *, double *, float *, float *,
                         const float *, const float *, const float *, const float *, const float *,
                         const float *, unsigned);
    int (*bn_silu_bwd_reduce)(struct kern_ctx *, const struct kern_bn *, double *, float *, float *,
                              const float *, const float *, const float *, const float *,
                              const float *, const float *, unsigned);
    int (*bn_bwd_apply)(struct kern_ctx *, const struct kern_bn *, float *, const float *,
                        const float *, const float *, const float *, const float *, const float *,
                        const double *, unsigned);
    int (*bn_silu_bwd_apply)(struct kern_ctx *, const struct kern_bn *, float *, const float *,
                             const float *, const float *, const float *, const float *,
                             const float *, const double *, unsigned);
    /* --- optim --- */
    /* --- yololoss --- */
    /* --- augment --- */
};

/* The CPU reference table (kern_ref_*); its contexts are KERN_BACKEND_CPU. Never NULL. */
KERN_API const struct kern_ops *kern_ops_ref(void);

#ifdef __cplusplus
}
#endif

#endif
