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

/* The CPUs this process may run on (its affinity mask, so taskset and cgroup cpusets count),
 * at least 1: what a default thread count is made from. Thread-safe. */
KERN_API int kern_cpu_count(void);

/* The threads a BLAS call made now would use (OpenBLAS's setting; 1 when the BLAS does not
 * say): 1 once a context with threads > 1 exists, so the two never oversubscribe. */
KERN_API int kern_blas_threads(void);

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
 * copies are enqueued on ctx's stream (cudaMemcpyAsync): from pageable host memory the driver
 * stages the source before the call returns, so it may be reused at once; from pinned memory
 * (cudaHostAlloc) the copy reads the source until it completes on the stream, so the source
 * must stay unchanged until the stream gets there (sync the context or wait on later work).
 * Device-to-host waits, so the host may read dst when it returns. Errors: -EINVAL, -EIO.
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
    /* Elements from one image to the next in x and dx (a channel slice of a wider tensor, as a
       concat's input read in place: image i's c_in planes start at x + i * x_nstride, dense
       within the image); 0: c_in h_in w_in (dense); else >= c_in h_in w_in (-EINVAL). Elements
       between the images are never read, and bwd_data never writes them. y, dy, w are dense.
       The lowp ops (struct kern_conv2d_lowp) take dense tensors only: 0 there (-EINVAL). */
    size_t x_nstride;
};

/* Fills *d for a square kernel, stride and padding (the YOLOv5 case); x_nstride 0 (dense). */
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
    /* Elements from one image to the next in y and dy, the output side (a channel slice of a
       wider tensor: producers write a concat's slice, no copy); 0: c * hw (dense). x and dx are
       always dense. */
    size_t y_nstride;
    /* The same for the residual input r of the fused residual-add ops; 0: c * hw (dense). */
    size_t r_nstride;
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
    /* Elements from one image to the next in x, dx (x_nstride) and in y, dy (y_nstride), so
       that either side may be a channel slice of a wider tensor (SPPF's pools read and write
       their concat buffer in place); 0: c h w of that side (dense); else at least that (-EINVAL).
       Elements between images are never touched. idx is always dense (n, c, h_out, w_out). */
    size_t x_nstride, y_nstride;
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
/* ---------------------------------------------------------------------------------------- */
/* Optimizer step, gradient norm, EMA and AMP casts over flat parameter buffers             */

/*
 * FLAT BUFFERS. The trainer keeps every parameter in one arena (float32, tensors at fixed
 * offsets, padding between them); the gradients, the SGD momentum buffers and the EMA copy use
 * the same layout (same offsets). A SEGMENT TABLE names the tensors an op touches: elements
 * [offset, offset + count) of every buffer, with the index of its parameter group (its lr,
 * momentum and weight decay). Elements outside the segments (padding, frozen tensors) are never
 * read or written. Segments must not overlap; their order is the order of the double sums of
 * kern_*_optim_sumsq on the CPU. The table lives in the backend's tensor memory (device memory
 * for CUDA: build it once at setup with kern_optim_segs_prepare, then kern_mem_copy it over),
 * so a step launches one kernel however many tensors the model has (docs/design.md).
 */
#define KERN_OPTIM_MAX_GROUPS 4

struct kern_optim_seg {
    size_t offset; /* first element of the tensor in every flat buffer */
    size_t count;  /* elements, >= 1 */
    size_t start;  /* sum of the counts of the segments before it (kern_optim_segs_prepare) */
    int group;     /* parameter group, 0 <= group < the descriptor's n_groups */
    int pad_;      /* zero; keeps the layout the same for host and device compilers */
};

/*
 * Checks a host segment table for buffers of `len` elements and `n_groups` groups, and fills
 * every seg[i].start (and pad_). Pure host function, no context: call it at setup, before
 * copying the table to the device. total: out, the sum of the counts (the `total` argument of
 * the ops). Returns 0; -EINVAL for NULL pointers, n_seg 0, a count of 0, a segment past len, a
 * group out of [0, n_groups), n_groups out of [1, KERN_OPTIM_MAX_GROUPS], or two segments that
 * overlap (nothing is written then). Thread-safe on distinct tables.
 */
KERN_API int kern_optim_segs_prepare(struct kern_optim_seg *seg, size_t n_seg, size_t len,
                                     int n_groups, size_t *total);

/* The settings of one parameter group, as PyTorch's param_groups hold them (rounded to float). */
struct kern_sgd_group {
    float lr;           /* learning rate, >= 0 */
    float momentum;     /* in [0, 1) */
    float weight_decay; /* L2 term added to the gradient (0: none), >= 0 */
};

/*
 * One SGD step (torch.optim.SGD, dampening 0, single-tensor float32 semantics) over the segments,
 * with gradient scaling, clipping and the EMA fused in the same pass:
 *   mult = grad_scale, times c = max_norm / (norm + 1e-6) when sumsq is given, max_norm > 0 and
 *     c < 1 (clip_grad_norm_); norm = sqrt(*sumsq) * grad_scale: the norm of the scaled gradients
 *     as PyTorch computes it after GradScaler.unscale_ (grad_scale a power of two);
 *   g = grad * mult (skipped when mult == 1); g = g + wd theta (wd != 0);
 *   buf = g on the first step, else momentum buf + g;
 *   g = nesterov ? g + momentum buf : buf;  theta = theta - lr g;
 *   ema (when given) = ema ema_decay + ema_weight theta (the updated theta; ModelEMA).
 * Every operation is one float32 rounding in this order (no fused multiply-add), so the CPU and
 * CUDA ops agree bit for bit given the same *sumsq.
 *
 * PER-STEP SCALARS IN MEMORY (dyn). A captured graph (kern_graph_capture) bakes every kernel
 * argument, but warmup changes lr and momentum every step, ModelEMA's decay grows every step,
 * `first` holds on the first step only and an fp16 scaler changes grad_scale. With dyn != NULL
 * the op reads those from *dyn (one struct kern_sgd_dyn of the backend's memory: device memory
 * on CUDA, read by the kernel when it runs) instead of from this descriptor: group[g].lr,
 * .momentum, .weight_decay (g < n_groups), first, grad_scale, ema_decay, ema_weight; the host
 * copies of those fields are then ignored (not read, not checked). The caller updates *dyn
 * before each replay (kern_mem_copy H2D, enqueued on the context's stream, so it is ordered
 * before the replay that reads it). The values and their rounding are the same, so a step with
 * dyn equals the step with the same host fields bit for bit, on either backend. The CPU op
 * checks the dyn values as it checks the host fields (-EINVAL for non-finite ones); the CUDA op
 * cannot (they are on the device): non-finite values there give non-finite parameters.
 *
 * REDUCED-PRECISION COPY (params_lowp). Under AMP every forward reads the parameters cast to
 * bf16 / fp16; casting the whole arena before each forward re-reads every parameter. With
 * params_lowp set the op also writes, for every element of the segments, params_lowp[i] = the
 * cast of the float32 params[i] it leaves (updated, or unchanged on a skipped step), rounded as
 * kern_*_cast_f32_bf16 / _f16 round: bit for bit the cast run after the step, over the
 * segments. Elements outside the segments are not written (they are not updated either, so a
 * copy cast once stays current there). params_lowp must not overlap the other buffers.
 * lowp_dtype is a host field (never in dyn): it is fixed for a buffer, so a captured graph may
 * bake it.
 */
struct kern_sgd_dyn {
    struct kern_sgd_group group[KERN_OPTIM_MAX_GROUPS]; /* lr, momentum, weight decay per group */
    int32_t first;                                      /* as kern_sgd.first */
    float grad_scale;                                   /* as kern_sgd.grad_scale */
    float ema_decay;                                    /* as kern_sgd.ema_decay */
    float ema_weight;                                   /* as kern_sgd.ema_weight */
};

struct kern_sgd {
    size_t n_seg;       /* segments in the table, >= 1 */
    size_t total;       /* sum of their counts (kern_optim_segs_prepare's total) */
    int n_groups;       /* groups used, 1..KERN_OPTIM_MAX_GROUPS */
    int nesterov;       /* 1: nesterov momentum (YOLOv5) */
    int first;          /* 1: the momentum buffers are not set yet (buf = g, never read) */
    int skip_nonfinite; /* 1: a non-finite *sumsq acts as found_inf (fp16 AMP: the norm pass is
                           the overflow check, no separate unscale pass) */
    float grad_scale;   /* gradient multiplier applied first: 1 / loss scale under AMP, else 1 */
    float max_norm;     /* clipping threshold on the unscaled norm; <= 0: no clipping */
    float ema_decay;    /* EMA d (float of ModelEMA's double d) */
    float ema_weight;   /* EMA 1 - d, rounded from double (not 1 - ema_decay in float) */
    struct kern_sgd_group group[KERN_OPTIM_MAX_GROUPS]; /* indexed by kern_optim_seg.group */
    void *params_lowp; /* NULL: none; else the reduced-precision copy of params (same layout,
                          16-bit elements of lowp_dtype, backend memory) that the op writes in
                          the same pass (see REDUCED-PRECISION COPY) */
    int lowp_dtype;    /* KERN_DT_BF16 or KERN_DT_F16 (kern.h "lowp"): params_lowp's type; read
                          only when params_lowp is set */
    const struct kern_sgd_dyn *dyn; /* NULL: the host fields above; else the per-step scalars
                                       in backend memory (see dyn above); last, so that
                                       zero-initialised descriptors keep today's behaviour */
};

/*
 * The SGD step above. params, momentum (the buffers), ema: flat buffers, updated in place (=);
 * ema may be NULL (no EMA). grads: read only (a clip does not write them). seg: the segment
 * table (d->n_seg entries, backend memory). sumsq: NULL, or one double of backend memory (from
 * kern_*_optim_sumsq, on the same stream: no host round trip); read when d->max_norm > 0 or
 * d->skip_nonfinite.
 * found_inf: NULL, or one int32 of backend memory: when it is nonzero params and momentum are
 * left alone (GradScaler's skipped step, decided on the device) and only the EMA is updated
 * (train.py runs ema.update after a skipped scaler.step too). Momentum buffers that start
 * zeroed make a skipped first step harmless: buf = momentum 0 + g is g. The buffers must not
 * overlap each other.
 * Errors: -EINVAL (NULL buffers, bad descriptor, params_lowp with a lowp_dtype other than
 * KERN_DT_BF16 / KERN_DT_F16; on the CPU also a segment table that does not match d); nothing is
 * written then.
 */
KERN_API int kern_ref_sgd_step(struct kern_ctx *ctx, const struct kern_sgd *d,
                               float *KERN_RESTRICT params, float *KERN_RESTRICT momentum,
                               float *KERN_RESTRICT ema, const float *KERN_RESTRICT grads,
                               const struct kern_optim_seg *KERN_RESTRICT seg,
                               const double *KERN_RESTRICT sumsq,
                               const int32_t *KERN_RESTRICT found_inf);

/*
 * *sumsq (one double of backend memory, overwritten) = sum over the segments of grads^2, each
 * square exact in double. The CPU sums in table order, element by element; CUDA sums fixed
 * per-block partials in a fixed order: deterministic run to run, equal to the CPU's within
 * double rounding. Non-finite gradients give a non-finite sum. total: as kern_sgd.total.
 * Errors: -EINVAL.
 */
KERN_API int kern_ref_optim_sumsq(struct kern_ctx *ctx, double *KERN_RESTRICT sumsq,
                                  const float *KERN_RESTRICT grads,
                                  const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg,
                                  size_t total);

/*
 * ema = ema decay + weight x over count elements (two float32 products and a sum, no FMA), for
 * the EMA of the buffer arena (BN running stats, anchors) and of whole arenas. decay, weight:
 * ModelEMA's d and 1 - d, each rounded from double. Errors: -EINVAL (NULL with count > 0).
 */
KERN_API int kern_ref_ema_update(struct kern_ctx *ctx, float *KERN_RESTRICT ema,
                                 const float *KERN_RESTRICT x, size_t count, float decay,
                                 float weight);

/*
 * kern_ref_ema_update with decay and weight read from dyn->ema_decay and dyn->ema_weight (one
 * struct kern_sgd_dyn of backend memory, the buffer kern_sgd.dyn points to), for the EMA of the
 * buffer arena inside a captured step, where ModelEMA's d changes every step. Bit for bit the
 * same as kern_ref_ema_update with those values. Errors: -EINVAL (NULL dyn, NULL with
 * count > 0; on the CPU also non-finite dyn values).
 */
KERN_API int kern_ref_ema_update_dyn(struct kern_ctx *ctx, float *KERN_RESTRICT ema,
                                     const float *KERN_RESTRICT x, size_t count,
                                     const struct kern_sgd_dyn *KERN_RESTRICT dyn);

/*
 * AMP unscale and check over the segments (torch._amp_foreach_non_finite_check_and_unscale_):
 * grads *= scale in place; *found_inf (one int32 of backend memory) is set to 1 when any
 * gradient is Inf or NaN, and left alone otherwise (zero it before the first op of a step).
 * Also the in-place clip of the CPU trainer (scale = the clip factor). Errors: -EINVAL.
 */
KERN_API int kern_ref_amp_unscale(struct kern_ctx *ctx, float *KERN_RESTRICT grads,
                                  const struct kern_optim_seg *KERN_RESTRICT seg, size_t n_seg,
                                  size_t total, float scale, int32_t *KERN_RESTRICT found_inf);

/*
 * Casts between float32 and the 16-bit AMP types, count elements, as PyTorch's .to() on the CPU:
 * round to nearest, ties to even; overflow gives +-Inf; fp16 subnormals are kept (gradual
 * underflow); NaN becomes a quiet NaN: 0x7e00 | sign for fp16 (as PyTorch), 0x7fc0 for bf16
 * (c10::BFloat16's scalar rule; torch 1.13's AVX2 loop writes 0xffff: any NaN is as good). bf16
 * keeps float32's range (no scaler needed); fp16 needs the dynamic loss scaler. The widening casts
 * are exact. Errors: -EINVAL (NULL with count > 0).
 */
KERN_API int kern_ref_cast_f32_bf16(struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                                    const float *KERN_RESTRICT src, size_t count);
KERN_API int kern_ref_cast_bf16_f32(struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                                    const uint16_t *KERN_RESTRICT src, size_t count);
KERN_API int kern_ref_cast_f32_f16(struct kern_ctx *ctx, uint16_t *KERN_RESTRICT dst,
                                   const float *KERN_RESTRICT src, size_t count);
KERN_API int kern_ref_cast_f16_f32(struct kern_ctx *ctx, float *KERN_RESTRICT dst,
                                   const uint16_t *KERN_RESTRICT src, size_t count);

/* --- yololoss --- */

/* ---------------------------------------------------------------------------------------- */
/* The whole YOLOv5 loss (ComputeLoss) in one call: forward and gradient                    */

/*
 * ultralytics v7.0 utils/loss.py ComputeLoss (docs/recipe.md S3), build_targets included,
 * with the gradient of the total to the Detect outputs, so that the training step needs no host
 * round trip (CUDA: every result stays in device memory; the op is graph-capturable).
 *
 * p[l], dp[l]  (bs, na, ny_l, nx_l, no), no = nc + 5, the raw logits of level l as Detect
 *              returns them in training (kern_ref_detect_reshape_fwd); k: 0-1 xy, 2-3 wh,
 *              4 objectness, 5.. classes. p and dp are host arrays of nl tensor pointers.
 * targets      (max_targets, 6) rows (image, class, x_centre, y_centre, w, h), xywh normalised
 *              to [0, 1]; the first *nt are used. nt: ONE int in tensor memory (device memory for
 *              CUDA), so a captured step reads each batch's count without a host sync.
 * out          KERN_YOLO_OUT_N floats in tensor memory (overwritten; see KERN_YOLO_OUT_*).
 *
 * BUILD_TARGETS, per level: every (target, anchor) pair in grid units is kept when
 * max(r, 1/r) < anchor_t for both r = (w, h) / anchor; each kept pair yields its centre cell and
 * the neighbours of the five-offset rule (g = 0.5: left when frac(gx) < 0.5 and gx > 1, up
 * likewise in y, right when frac(nx - gx) < 0.5 and nx - gx > 1, down likewise); the cell
 * (gi, gj) = trunc(gxy - offset) is clamped to the grid and tbox = (gx - gi, gy - gj, gw, gh) is
 * taken after the clamp. ENTRY ORDER is PyTorch's: offset (centre, left, up, right, down), then
 * anchor, then target.
 * LOSS, per level: lbox += mean(1 - CIoU(pbox, tbox)), pxy = 2 sigmoid - 0.5, pwh =
 * (2 sigmoid)^2 anchor; tobj[b, a, gj, gi] = max(CIoU, 0) (detached; (1 - gr) + gr max(CIoU, 0)
 * when gr < 1); when several entries hit one cell THE LAST ENTRY IN ENTRY ORDER WINS (PyTorch's
 * CPU index_put_ writes in order); lcls += BCE(class logits, one-hot smoothed to cp = 1 - eps/2,
 * cn = eps/2, pos_weight cls_pw) over n nc, only when nc > 1; lobj += balance[l]
 * BCE(objectness, tobj, pos_weight obj_pw) over bs na ny nx. Then lbox *= box, lobj *= obj,
 * lcls *= cls, total = (lbox + lobj + lcls) bs. BCE pos_weight w: (1 - t) x + (1 + (w - 1) t)
 * (log1p(exp(-|x|)) + max(-x, 0)); with w = 1 exactly the usual max(x, 0) - x t +
 * log1p(exp(-|x|)). Means are summed in double; everything else is float32 in PyTorch's order.
 * GRADIENT (dp may be NULL: loss only): d total / d p[l], alpha of CIoU held constant;
 * duplicates accumulate (autograd's index backward), each entry adding its contribution to its
 * cell in entry order. dp[l] (=|+=) by KERN_ACCUM_DX: overwritten, every element written, or
 * added to. dp must not alias p.
 * SCRATCH: kern_*_yolo_loss_scratch_size(ctx, d) bytes, 16-byte aligned, given as scratch, or
 * scratch NULL to use the context's workspace; -KERN_EWORKSPACE when it is smaller. The layout
 * differs between backends and is private except through kern_ref_yolo_loss_entries.
 * ERRORS: -EINVAL (bad descriptor, NULL pointers, accum bits; reference only: *nt outside
 * [0, max_targets] or a target row that is not finite, has an image outside [0, bs), a class
 * outside [0, nc) or a negative size; nothing is written), -KERN_EWORKSPACE, -KERN_EBACKEND.
 * The CUDA twin cannot see *nt or the rows at call time: it treats a bad count as 0 and skips
 * bad rows, and flags both in out[KERN_YOLO_OUT_STATUS] with NaN losses (see there).
 */
#define KERN_YOLO_MAX_LEVELS  8  /* detection levels */
#define KERN_YOLO_MAX_ANCHORS 16 /* anchors per level */
#define KERN_YOLO_OFFSETS     5  /* centre, left, up, right, down */

/* Indices into the op's `out` floats. */
enum {
    KERN_YOLO_OUT_LBOX = 0,    /* box loss after the gain, before x bs (what ultralytics logs) */
    KERN_YOLO_OUT_LOBJ = 1,    /* objectness loss after the gain */
    KERN_YOLO_OUT_LCLS = 2,    /* class loss after the gain */
    KERN_YOLO_OUT_TOTAL = 3,   /* (lbox + lobj + lcls) bs: what the gradient differentiates */
    KERN_YOLO_OUT_RAW_BOX = 4, /* sum over levels of mean(1 - CIoU), before the gain */
    KERN_YOLO_OUT_RAW_OBJ = 5, /* sum over levels of balance x objectness BCE, before the gain */
    KERN_YOLO_OUT_RAW_CLS = 6, /* sum over levels of the class BCE, before the gain */
    KERN_YOLO_OUT_STATUS = 7,  /* 0, or (CUDA) a sum of KERN_YOLO_BAD_*: every loss above is NaN */
    KERN_YOLO_OUT_N = 8
};
#define KERN_YOLO_BAD_COUNT 1 /* *nt outside [0, max_targets] (treated as 0) */
#define KERN_YOLO_BAD_ROW   2 /* some target row invalid (skipped) */

struct kern_yolo_loss {
    int nl;          /* levels, 1..KERN_YOLO_MAX_LEVELS */
    int na;          /* anchors per level, 1..KERN_YOLO_MAX_ANCHORS */
    int nc;          /* classes, 1..1000000 (no = nc + 5) */
    int bs;          /* images per batch, >= 1 */
    int max_targets; /* most target rows per call, >= 1: sizes the scratch (and the CUDA grid) */
    int ny[KERN_YOLO_MAX_LEVELS], nx[KERN_YOLO_MAX_LEVELS];        /* grid of level l, 1..65536 */
    float anchors[KERN_YOLO_MAX_LEVELS][KERN_YOLO_MAX_ANCHORS][2]; /* (w, h), grid units, > 0 */
    float balance[KERN_YOLO_MAX_LEVELS]; /* objectness weight per level (4.0, 1.0, 0.4) */
    float box, obj, cls;   /* loss gains, finite (train.py's scaled hyp.box, obj, cls) */
    float anchor_t;        /* anchor-multiple threshold, > 0 (4.0) */
    float label_smoothing; /* eps in [0, 1) */
    float cls_pw, obj_pw;  /* BCE positive weights, > 0 (1.0) */
    float gr;              /* iou ratio of the objectness target, in [0, 1] (1.0) */
};

/*
 * Fills *d with the YOLOv5 defaults for nl levels of na anchors, nc classes, bs images and
 * max_targets rows: gains box 0.05, obj 1.0, cls 0.5, anchor_t 4, no smoothing, pos weights 1,
 * gr 1, balance [4.0, 1.0, 0.4] (three levels) or [4.0, 1.0, 0.25, 0.06, 0.02]; grids and
 * anchors zero (the caller sets them). Thread-safe.
 */
KERN_API void kern_yolo_loss_init(struct kern_yolo_loss *d, int nl, int na, int nc, int bs,
                                  int max_targets);

/* Checks a descriptor (the ranges above; entry and cell counts must fit int32). 0 or -EINVAL. */
KERN_API int kern_yolo_loss_check(const struct kern_yolo_loss *d);

/*
 * Bytes of scratch the op needs for d on ctx's backend into *bytes. ctx may be NULL (the size
 * depends on the backend only). Errors: -EINVAL, -KERN_EBACKEND.
 */
KERN_API int kern_ref_yolo_loss_scratch_size(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                             size_t *bytes);

/* The whole loss and its gradient (see above). nt, targets, out, dp, p: host memory here. */
KERN_API int kern_ref_yolo_loss(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                float *const *dp, float *KERN_RESTRICT out, const float *const *p,
                                const float *KERN_RESTRICT targets, const int *KERN_RESTRICT nt,
                                void *scratch, size_t scratch_bytes, unsigned accum);

/*
 * Reference only, host helpers for inspection and the trainer's tests. build_targets alone into
 * scratch (as kern_ref_yolo_loss's first phase): returns the number of entries over all levels,
 * or -EINVAL (bad arguments, nt, or rows; every level is then left with 0 entries),
 * -KERN_EWORKSPACE. scratch: as the op's (never NULL here). Thread-safe on distinct scratch.
 */
KERN_API int kern_ref_yolo_build_targets(const struct kern_yolo_loss *d, void *scratch,
                                         size_t scratch_bytes, const float *targets, int nt);

/* The entries of one level left in a reference scratch by the last build, in entry order. */
struct kern_yolo_entries {
    int n;             /* entries */
    const int *b;      /* (n) image index */
    const int *a;      /* (n) anchor index */
    const int *gj;     /* (n) cell row, clamped */
    const int *gi;     /* (n) cell column, clamped */
    const int *cls;    /* (n) class */
    const float *tbox; /* (n, 4) gx - gi, gy - gj, gw, gh in grid units */
    const float *ciou; /* (n) CIoU of the prediction, after kern_ref_yolo_loss (else stale) */
};

/*
 * Views of level l (0 <= l < nl) of a reference scratch into *out, valid while the scratch is
 * and until the next build into it. Errors: -EINVAL, -KERN_EWORKSPACE (scratch too small).
 */
KERN_API int kern_ref_yolo_loss_entries(const struct kern_yolo_loss *d, const void *scratch,
                                        size_t scratch_bytes, int l, struct kern_yolo_entries *out);

/* --- augment --- */

/* ---------------------------------------------------------------------------------------- */
/* Augmentation pixels: mosaic paste, warp, HSV, flips, mixup, the batch tensor (uint8)      */

/*
 * The pixel work of YOLOv5's training augmentation (trainer/data/augment.h keeps the draws and the
 * labels), so that it runs on either backend and the GPU builds batches in device memory.
 *
 * IMAGES. RGB8, HWC, h rows of w * 3 bytes with no padding, sizes 1..32767 (OpenCV's
 * fixed-point coordinates are 16-bit). Pixel pointers are the backend's memory (device memory
 * for CUDA); descriptors (struct kern_aug_*), matrices and LUTs are host memory, read during
 * the call only. The arithmetic is OpenCV 4.x's uint8 code paths as trainer/data/augment.h
 * documents them (warpAffine / warpPerspective INTER_LINEAR fixed point, cvtColor HSV 8-bit,
 * numpy's truncating casts); the CUDA twins use only integer and correctly rounded IEEE
 * operations in the same order (no contraction), so they give the same bytes.
 * THREADS. Unlike the other ops, all but kern_ref_aug_batch use nothing of a CPU context but its
 * backend (no workspace, no worker threads): one CPU context may serve them from any number of
 * threads at once. Errors: -EINVAL (NULL pointers, sizes out of range, regions outside their
 * images), -KERN_EBACKEND; the CUDA twins also -EIO / -ENOMEM as kern_cuda.h says.
 */
#define KERN_AUG_FILL      114 /* grey of the mosaic canvas and of the warp border (ultralytics) */
#define KERN_AUG_MAX_PASTE 4   /* regions of one canvas: the 4 tiles of a mosaic */

/* Element type of the batch tensor (the trainer's TRN_PIXELS_*). */
enum { KERN_AUG_U8 = 0, KERN_AUG_F32 = 1 };

/* One rectangle copied from a tile onto a canvas. */
struct kern_aug_paste {
    const uint8_t *src; /* tile pixels, src_h rows of src_w * 3 bytes (backend memory) */
    int src_w, src_h;   /* tile size, 1..32767 */
    int src_x, src_y;   /* top-left of the region in the tile, >= 0 */
    int dst_x, dst_y;   /* top-left of the region on the canvas, >= 0 */
    int w, h;           /* region size in pixels, >= 0 (0: nothing); inside tile and canvas */
};

/*
 * A canvas filled with KERN_AUG_FILL and regions pasted in order (a later region wins where
 * they overlap; the mosaic's never do). The fused batch op samples it without materialising it.
 */
struct kern_aug_canvas {
    int w, h;                                        /* canvas size, 1..32767 */
    int n_paste;                                     /* regions in use, 0..KERN_AUG_MAX_PASTE */
    struct kern_aug_paste paste[KERN_AUG_MAX_PASTE]; /* [0, n_paste) in paste order */
};

/* Returns 0 when c is a valid canvas (sizes, counts, every region inside its tile and the
 * canvas, src non-NULL for non-empty regions), else -EINVAL. Host only, any thread. */
KERN_API int kern_aug_canvas_check(const struct kern_aug_canvas *c);

/*
 * The inverse (destination -> source) of a forward warp matrix M (row-major 3x3, source pixel
 * to destination), as cv::warpAffine (perspective 0: 1 / (m0 m4 - m1 m3) and the explicit 2x3
 * formulas; only M[0..6) read; inv[6..9) = 0, 0, 1) and cv::warpPerspective (cv::invert
 * DECOMP_LU: cofactors over a double determinant; a singular M gives zeros) compute it before
 * sampling. inv: out. Host only, any thread.
 */
KERN_API void kern_aug_warp_invert(const double M[9], int perspective, double inv[9]);

/*
 * canvas (c->h rows of c->w * 3 bytes) = KERN_AUG_FILL, then every region of c copied on.
 * The regions' tiles must not overlap the canvas.
 */
KERN_API int kern_ref_aug_paste(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT canvas,
                                const struct kern_aug_canvas *c);

/*
 * dst (dst_w x dst_h) = src (src_w x src_h) sampled at inv (from kern_aug_warp_invert) with
 * INTER_LINEAR and BORDER_CONSTANT `border`, as cv::warpAffine (perspective 0, inv 2x3) or
 * cv::warpPerspective (inv 3x3) with WARP_INVERSE_MAP: affine source coordinates in fixed
 * point (AB_BITS 10, 5 fraction bits), perspective ones per 1024/min(dst_h, 16)-column block
 * in double; 15-bit bilinear weights; taps outside src read `border`. dst must not overlap src.
 */
KERN_API int kern_ref_aug_warp(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT dst, int dst_w,
                               int dst_h, const uint8_t *KERN_RESTRICT src, int src_w, int src_h,
                               const double inv[9], int perspective, uint8_t border);

/* augment_hsv's per-image lookup tables, applied to OpenCV's 8-bit H, S and V. */
struct kern_aug_hsv_lut {
    uint8_t h[256]; /* H (0..179) -> (uint8)((H * gain_h) mod 180) */
    uint8_t s[256]; /* S -> (uint8)clip(S * gain_s, 0, 255) */
    uint8_t v[256]; /* V -> (uint8)clip(V * gain_v, 0, 255) */
};

/* Fill *lut from the gains (H, S, V multipliers 1 + U(-1, 1) hsv_*) as ultralytics' augment_hsv
 * (numpy float64, truncating casts). lut: out. Host only, any thread. */
KERN_API void kern_aug_hsv_lut_init(struct kern_aug_hsv_lut *lut, const double gain[3]);

/*
 * augment_hsv in place on img (w x h): RGB -> HSV (OpenCV 8-bit, integer tables), the LUTs,
 * HSV -> RGB (OpenCV 8-bit, float), whose AVX2 SIMD loop truncates each row's first
 * w / 32 * 32 pixels while its scalar tail rounds (the row width matters; rows of 640 are all
 * truncated). -EINVAL also when lut->h maps some H in 0..179 to 180 or more (kern_aug_hsv_lut_init
 * never does).
 */
KERN_API int kern_ref_aug_hsv(struct kern_ctx *ctx, uint8_t *img, int w, int h,
                              const struct kern_aug_hsv_lut *lut);

/* Mirror img (w x h) in place: left-right when lr != 0, top-bottom when ud != 0. */
KERN_API int kern_ref_aug_flip(struct kern_ctx *ctx, uint8_t *img, int w, int h, int lr, int ud);

/*
 * mixup in place: img[i] = (uint8)(img[i] r + img2[i] (1 - r)) in double, truncated (numpy's
 * astype(uint8)). n bytes each; r in [0, 1].
 */
KERN_API int kern_ref_aug_mixup(struct kern_ctx *ctx, uint8_t *KERN_RESTRICT img,
                                const uint8_t *KERN_RESTRICT img2, size_t n, double r);

/*
 * One HWC image (w x h) to planar CHW: dst is 3 planes of h * w elements (R, G, B), uint8
 * (KERN_AUG_U8) or float32 value / 255.0f (KERN_AUG_F32): the loader's batch layout.
 */
KERN_API int kern_ref_aug_to_nchw(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype,
                                  const uint8_t *KERN_RESTRICT hwc, int w, int h);

/*
 * Everything about the pixels of one training sample (s x s), prepared on the host from the
 * random draws (the trainer's trn_aug_plan_sample): warp canvas[0] by inv[0]; with mixup also
 * canvas[1] by inv[1] and blend (first image weight mixup_ratio); HSV; flips. The CUDA twin takes
 * the descriptors as kernel parameters (16 per launch; CUDA 12.1+ driver for their 21 KB).
 */
struct kern_aug_sample {
    struct kern_aug_canvas canvas[2]; /* source canvas of each warp; [1] read only with mixup */
    double inv[2][9];                 /* inverse warp matrices (kern_aug_warp_invert) */
    int perspective[2];               /* 1: warpPerspective, 0: warpAffine (inv 2x3) */
    int mixup;                        /* 1: blend with the second warp */
    double mixup_ratio;               /* weight of the first image, [0, 1] */
    int hsv;                          /* 1: apply lut */
    struct kern_aug_hsv_lut lut;      /* HSV tables when hsv */
    int flip_lr, flip_ud;             /* 1: mirror left-right / top-bottom (after HSV) */
};

/* Returns 0 when smp is a valid sample for output side s, else -EINVAL. Host only. */
KERN_API int kern_aug_sample_check(const struct kern_aug_sample *smp, int s);

/*
 * The fused batch write: for each of the n samples, every output pixel is computed in one pass
 * (warp taps read straight from the pasted regions, KERN_AUG_FILL elsewhere, which equals
 * pasting onto a canvas and warping it with border KERN_AUG_FILL; then mixup, HSV, flips) and
 * written to image i of dst, (n, 3, s, s) NCHW, uint8 or float / 255 (dtype). Bytes equal to
 * kern_ref_aug_paste + _warp (+ the same for canvas[1] and _mixup) + _hsv + _flip + _to_nchw.
 * samples: n host descriptors; their tile pointers are the backend's memory. s: 1..32767;
 * n >= 1. Images are split over the context's threads (one thread at a time per context for
 * this op, as the other ops); the split never changes a byte.
 */
KERN_API int kern_ref_aug_batch(struct kern_ctx *ctx, void *KERN_RESTRICT dst, int dtype, int s,
                                const struct kern_aug_sample *samples, int n);

/* --- graph --- */
/* ---------------------------------------------------------------------------------------- */
/* Graphs: a caller's sequence of ops captured once and replayed (one CUDA graph per step)  */

/*
 * A training step is a few thousand small launches; on the GPU their launch gaps cost more than
 * the work. A graph records the ops a caller's function enqueues on a context once and replays
 * them with one launch. The backend decides what recording means:
 *   CPU:  capture calls fn(arg) once and keeps (fn, arg); replay calls fn(arg) again. So a CPU
 *         "graph" is exactly a direct call (same results, same errors), and the trainer's code
 *         path is the same on both backends.
 *   CUDA: capture runs fn(arg) between cudaStreamBeginCapture and cudaStreamEndCapture on the
 *         context's stream (nothing executes while recording), instantiates the graph, then
 *         launches it once; replay is one cudaGraphLaunch on the stream (asynchronous, like the
 *         ops). Mode cudaStreamCaptureModeThreadLocal: an unsafe call (cudaMalloc, a
 *         synchronisation, ...) made by the capturing thread fails the capture, while other
 *         threads (the data loader's uploads, other devices' contexts) are not disturbed, as
 *         cudaStreamCaptureModeGlobal would do; Relaxed would let a cudaMalloc inside fn pass
 *         silently, uncaptured.
 * On both backends kern_graph_capture therefore has the effect of one call of fn(arg), and each
 * kern_graph_replay the effect of one more.
 *
 * WHAT A REPLAY SEES. The ops' arguments are frozen at capture: the same pointers, shapes, and
 * host scalars (lr, decay, ...) at every replay. Only the contents of memory change. So every
 * value that changes between steps must be read from backend memory that the caller rewrites
 * before each replay: the input batch, the targets and their count (kern_*_yolo_loss reads nt
 * from memory), the SGD / EMA scalars (struct kern_sgd_dyn through kern_sgd.dyn,
 * kern_*_ema_update_dyn). fn must take the same path at every call (no branch on step-dependent
 * host state) and must not read results on the host.
 *
 * CAPTURE-SAFE CUDA OPS. Every kern_cuda_* op that only enqueues kernels (and cuDNN / CUB calls)
 * on the stream: the BN family, SiLU, pool, upsample, concat, add, detect, bce_logits_bwd, CIoU,
 * kern_cuda_yolo_loss (its scratch sized at setup), sgd_step, optim_sumsq, ema_update(_dyn),
 * amp_unscale, the casts, the aug ops; kern_mem_zero; kern_mem_copy D2D; conv2d fwd / bwd_data /
 * bwd_filter / bwd_bias and kern_cuda_conv2d_workspace_size ONCE THEIR SHAPE IS PLANNED (called
 * before, outside the capture). NOT capture-safe (the capture fails with -ENOTSUP):
 *   - kern_cuda_bce_logits_fwd (waits on the stream to return a host float; use
 *     kern_cuda_yolo_loss, whose outputs stay on the device);
 *   - the first conv2d op or kern_cuda_conv2d_workspace_size of a new shape (creates the cuDNN
 *     handle, runs cudnnFind*, which allocates and synchronises);
 *   - kern_mem_alloc, kern_mem_free, kern_ctx_reserve, kern_ctx_set_workspace (cudaMalloc /
 *     cudaFree / synchronise), kern_ctx_create / kern_ctx_destroy;
 *   - kern_mem_copy D2H (it waits), kern_cuda_ctx_sync, and any cudaMemcpy (non-async),
 *     cudaStreamSynchronize or cudaDeviceSynchronize of the caller's own;
 *   - kern_mem_copy H2D from pageable host memory (rejected or, at best, a copy that re-reads
 *     the same host address at every replay): upload the batch and the per-step scalars BEFORE
 *     the replay, from pinned memory, with kern_mem_copy on the context's stream.
 * Plan first: run fn once directly (it makes the conv plans and sizes the workspaces), then
 * capture.
 */
struct kern_graph;

/* The recorded function: enqueues ops on the context it was written for and returns 0 or the
 * first negative code of an op (and stops there). */
typedef int (*kern_graph_fn)(void *arg);

/*
 * Records fn(arg) on ctx as a graph and runs it once (see above). arg is borrowed: it must stay
 * valid (and, on the CPU, keep describing the same work) until kern_graph_destroy, because the
 * CPU replay calls fn(arg) again. On success *out owns the new graph; returns 0. On error *out
 * is NULL, nothing was run on CUDA (on the CPU, fn ran once and its error is returned), and ctx
 * is usable again:
 *   -EINVAL       NULL ctx, fn or out;
 *   -ENOTSUP      CUDA: an op inside fn is not capture-safe (cudaErrorStreamCaptureUnsupported,
 *                 ...Invalidated, ...Implicit, ...); kern_cuda_ctx_last_error(ctx) names the CUDA
 *                 error and, when fn's op recorded one, the op;
 *   -EBUSY        CUDA: ctx's stream is already being captured (graphs do not nest);
 *   fn's own code CUDA: fn failed for another reason (-EINVAL, -KERN_EWORKSPACE, ...);
 *   -ENOMEM       the graph could not be allocated;
 *   -EIO          CUDA: instantiation or the first launch failed (kern_cuda_ctx_last_error).
 * Thread safety: as any op on ctx (one thread at a time), and on CUDA the same thread for the
 * whole capture.
 */
KERN_API int kern_graph_capture(struct kern_ctx *ctx, kern_graph_fn fn, void *arg,
                                struct kern_graph **out);

/*
 * Runs the recorded work once more on its context: CPU, fn(arg) again, returning its code; CUDA,
 * one cudaGraphLaunch on the context's stream, returning as soon as it is enqueued (results
 * visible after kern_cuda_ctx_sync or a D2H kern_mem_copy; memory read by the graph may be
 * rewritten by work enqueued on the same stream after the replay). The context must still exist.
 * Errors: -EINVAL (NULL g), -EIO (CUDA launch failure, kern_cuda_ctx_last_error), fn's code (CPU).
 */
KERN_API int kern_graph_replay(struct kern_graph *g);

/* Frees g (after the replays enqueued on CUDA finish using it). Accepts NULL. Call it before
 * kern_ctx_destroy of its context. */
KERN_API void kern_graph_destroy(struct kern_graph *g);

/* --- lowp --- */
/* ---------------------------------------------------------------------------------------- */
/* conv2d in reduced precision (AMP): bf16 / fp16 tensors, fp32 accumulation, NCHW or NHWC  */

/*
 * The convolutions of PyTorch's autocast: inputs and weights in bf16 (or fp16), products and
 * sums in float32, outputs in the reduced type; the parameter gradients come back as float32
 * so that they add straight into the fp32 master gradients. These are separate entry points
 * with their own descriptor: struct kern_conv2d and the float32 kern_*_conv2d_* ops above are
 * unchanged (bit for bit).
 *
 * ELEMENT TYPES (dtype). KERN_DT_BF16 and KERN_DT_F16 tensors are arrays of uint16_t holding
 * the bit patterns (bf16: the top half of a float32; fp16: IEEE binary16), as the casts
 * kern_*_cast_f32_bf16 / _f16 write them. KERN_DT_F32 is float32 (then these ops are float32
 * convolutions with a layout choice). Let r(v) be the rounding of a float32 v to dtype, round to
 * nearest, ties to even, overflow to +-Inf, fp16 subnormals kept (as the casts; identity for
 * KERN_DT_F32), and S the exact-product float32 sum the op computes (every product of two
 * 16-bit values is exact in float32; the order of the float32 additions is the backend's).
 * The CPU reference defines:
 *   fwd          y  = r(S + b)                 bias (dtype, optional) added in float32 before the
 *                                              one rounding
 *   bwd_data     dx = r(S)  |  r(dx_old + S)   with KERN_ACCUM_DX (dx_old widened, float32 add)
 *   bwd_filter   dw = r(S)  |  dw_old + r(S)   dw float32; r(S) widened exactly
 *   bwd_bias     db = r(S)  |  db_old + r(S)   db float32; S the sum of dy over n, h, w in
 *                                              double, rounded to float32
 * The gradients r(S) of the parameters are what PyTorch gives: under autocast the conv's weight
 * gradient is a bf16 tensor that the cast's backward widens and accumulates into the fp32 .grad.
 * The reduced-type dw also matches cuDNN's legacy API, which requires dw in the input type
 * (the CUDA twin computes r(S) into its workspace, then widens and adds it in one kernel).
 * fp16 gradients can overflow to Inf: that is the dynamic loss scaler's signal (kern_sgd
 * skip_nonfinite / kern_*_amp_unscale found_inf), as in PyTorch.
 *
 * LAYOUT. KERN_LAYOUT_NCHW: x (n, c_in, h, w), y (n, c_out, h_out, w_out), w and dw (c_out,
 * c_in, k_h, k_w), as the float32 ops. KERN_LAYOUT_NHWC (PyTorch channels_last): x (n, h, w,
 * c_in), y (n, h_out, w_out, c_out), w and dw (c_out, k_h, k_w, c_in). Bias and db: (c_out).
 * The layout only moves elements: the CPU reference gives the same values bit for bit in both.
 *
 * WORKSPACE. kern_*_conv2d_lowp_workspace_size, as the float32 ops: reserve the maximum once.
 * CPU: per working thread c_in h_in w_in + c_out h_out w_out floats more than the float32 op
 * (the widened image and the float32 output), plus c_out c_in k_h k_w floats shared (widened
 * weights, or the float32 dw sum). CUDA: the cuDNN algorithms' need plus, for bwd_filter and
 * bwd_bias, the reduced-type dw / db (16-byte aligned).
 *
 * Errors, aliasing, threads and accumulation bits: as the float32 conv2d ops (-EINVAL also for
 * a dtype or layout outside the enums).
 */
enum { KERN_DT_F32 = 0, KERN_DT_BF16 = 1, KERN_DT_F16 = 2 };
enum { KERN_LAYOUT_NCHW = 0, KERN_LAYOUT_NHWC = 1 };

struct kern_conv2d_lowp {
    struct kern_conv2d conv; /* the shape, as for the float32 ops */
    int dtype;               /* KERN_DT_*: type of x, w, bias, y, dx, dy (dw, db are float32) */
    int layout;              /* KERN_LAYOUT_*: of x, y, dx, dy, w, dw */
};

/* Fills *d with the shape *conv (copied), dtype and layout. NULL d or conv: nothing. */
KERN_API void kern_conv2d_lowp_init(struct kern_conv2d_lowp *d, const struct kern_conv2d *conv,
                                    int dtype, int layout);

/* Bytes of workspace for the four lowp ops of d on ctx (see WORKSPACE). Errors: -EINVAL. */
KERN_API int kern_ref_conv2d_lowp_workspace_size(struct kern_ctx *ctx,
                                                 const struct kern_conv2d_lowp *d, size_t *bytes);

/* y = r(conv(x, w) + bias); bias (c_out, dtype) may be NULL. y is overwritten. */
KERN_API int kern_ref_conv2d_lowp_fwd(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                      void *KERN_RESTRICT y, const void *KERN_RESTRICT x,
                                      const void *KERN_RESTRICT w, const void *KERN_RESTRICT bias);

/* dx (dtype) = r(S) or r(dx + S) given dy (dtype) and w (dtype). Uses KERN_ACCUM_DX. */
KERN_API int kern_ref_conv2d_lowp_bwd_data(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                           void *KERN_RESTRICT dx, const void *KERN_RESTRICT dy,
                                           const void *KERN_RESTRICT w, unsigned accum);

/* dw (float32, layout) = r(S) or dw + r(S), summed over the batch. Uses KERN_ACCUM_DPARAM. */
KERN_API int kern_ref_conv2d_lowp_bwd_filter(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                             float *KERN_RESTRICT dw, const void *KERN_RESTRICT dy,
                                             const void *KERN_RESTRICT x, unsigned accum);

/* db[c_out] (float32) = r(S) or db + r(S), S the sum of dy. Uses KERN_ACCUM_DPARAM. */
KERN_API int kern_ref_conv2d_lowp_bwd_bias(struct kern_ctx *ctx, const struct kern_conv2d_lowp *d,
                                           float *KERN_RESTRICT db, const void *KERN_RESTRICT dy,
                                           unsigned accum);

/* --- resadd --- */
/* ---------------------------------------------------------------------------------------- */
/* BN + SiLU + residual add, fused (the YOLOv5 bottleneck's x + cv2(cv1(x)))                */

/*
 * y = silu(bn(x)) + r in one pass: the three BN+SiLU forwards above (training, eval, and the
 * SyncBatchNorm apply phase) with a residual r (n, c, hw) added to the SiLU output, so that the
 * SiLU output is never stored. Every parameter, update and error is the unfused op's; r comes
 * last. The result is bit for bit that of the unfused composition on the same backend:
 * bn_silu_fwd_* into y, then add_fwd(y, y, r) (the SiLU output is rounded to float before the
 * add; no fused multiply-add across the two).
 * STRIDES. y steps d->y_nstride elements from one image to the next and r steps d->r_nstride
 * (0: c hw, dense), so either may be a channel slice of a wider tensor: element (i, ch, p) of y
 * is y[i y_nstride + ch hw + p]; elements between the slices are never touched. x is dense.
 * -EINVAL also for a nonzero stride below c hw, or a NULL r.
 * ALIASING. y must not overlap x or r (the prototypes carry KERN_RESTRICT).
 * BACKWARD. No op of its own: d(sum)/d(silu output) = 1, so kern_ref_bn_silu_bwd (or the
 * phased backward) reads the sum's gradient as dy, and r's gradient is the sum's too.
 */
KERN_API int
kern_ref_bn_silu_add_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d,
                               float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                               float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                               float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                               const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                               const float *KERN_RESTRICT r);

/* Eval: y = silu(bn_eval(x)) + r; as kern_ref_bn_silu_fwd_eval. */
KERN_API int kern_ref_bn_silu_add_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d,
                                           float *KERN_RESTRICT y, const float *KERN_RESTRICT x,
                                           const float *KERN_RESTRICT gamma,
                                           const float *KERN_RESTRICT beta,
                                           const float *KERN_RESTRICT running_mean,
                                           const float *KERN_RESTRICT running_var,
                                           const float *KERN_RESTRICT r);

/* SyncBatchNorm forward phase 2: y = silu(bn(x)) + r with the summed statistics; as
 * kern_ref_bn_silu_fwd_apply. */
KERN_API int
kern_ref_bn_silu_add_fwd_apply(struct kern_ctx *ctx, const struct kern_bn *d,
                               float *KERN_RESTRICT y, float *KERN_RESTRICT save_mean,
                               float *KERN_RESTRICT save_invstd, float *KERN_RESTRICT running_mean,
                               float *KERN_RESTRICT running_var, const float *KERN_RESTRICT x,
                               const float *KERN_RESTRICT gamma, const float *KERN_RESTRICT beta,
                               const double *KERN_RESTRICT sums, const float *KERN_RESTRICT r);

/* --- stride --- */
/* ---------------------------------------------------------------------------------------- */
/* Channel slices: producers and consumers of a concat's inputs work in place               */

/*
 * A Concat (and C3's and SPPF's concats) need not copy: each input can live in its channel
 * slice of the concat's output, written there by its producer and read there by its consumers.
 * A channel slice [c_off, c_off + c) of an (n, C, h, w) tensor is dense within an image (c h w
 * elements from base + c_off h w) and strided across the batch: image i starts nstride = C h w
 * elements after image i - 1. The ops that produce or consume such tensors take that n-stride
 * (0 always means dense, the default of every init function and of a zeroed descriptor, with
 * results bit for bit those of a dense call):
 *   struct kern_bn.y_nstride       the output y and its gradient dy of every BN / BN+SiLU op
 *   struct kern_conv2d.x_nstride   the input x and its gradient dx of the float32 conv2d ops
 *   struct kern_pool2d.x_nstride, .y_nstride   max pool's input and output sides
 *   kern_*_upsample2x_ns_fwd / _bwd            nearest x2 upsample with both sides strided
 *   kern_*_cast_f32_lowp_ns / _lowp_f32_ns     AMP casts between a slice and dense scratch
 * Elements between the images (the other channels of the concat) are never read nor written,
 * so several producers may fill one concat buffer, each its own slice.
 */

/*
 * Nearest x2 upsample with n-strides: x (n, c, h, w) -> y (n, c, 2h, 2w) as
 * kern_ref_upsample2x_fwd (planes = n c), with image i of y at y + i * y_nstride (0: 4 c h w)
 * and of x at x + i * x_nstride (0: c h w). Errors: -EINVAL (bad shape, NULL, a non-zero stride
 * below its dense value).
 */
KERN_API int kern_ref_upsample2x_ns_fwd(struct kern_ctx *ctx, float *KERN_RESTRICT y,
                                        const float *KERN_RESTRICT x, int n, int c, int h, int w,
                                        size_t y_nstride, size_t x_nstride);

/* Its backward: dx (=|+=) the 2x2 block sums of dy, with the same strides. KERN_ACCUM_DX. */
KERN_API int kern_ref_upsample2x_ns_bwd(struct kern_ctx *ctx, float *KERN_RESTRICT dx,
                                        const float *KERN_RESTRICT dy, int n, int c, int h, int w,
                                        size_t x_nstride, size_t y_nstride, unsigned accum);

/*
 * Autocast's casts for a conv whose float32 input is a channel slice. dtype: KERN_DT_BF16 or
 * KERN_DT_F16; the float32 side is n images of `inner` elements, image i at i * nstride (0:
 * inner); the 16-bit side is dense (n, inner). Roundings as kern_ref_cast_f32_bf16 / _f16 (and
 * the exact widenings), so the result is the dense cast of the gathered slice bit for bit.
 * kern_ref_cast_f32_lowp_ns: dst (16-bit, overwritten) = r(src slice).
 * kern_ref_cast_lowp_f32_ns: dst slice (=|+=) widen(src) (KERN_ACCUM_DX: one float32 add, as a
 * widen into scratch then kern_ref_add_bwd would).
 * Errors: -EINVAL (dtype, n < 0, a non-zero nstride < inner, NULL with n inner > 0).
 */
KERN_API int kern_ref_cast_f32_lowp_ns(struct kern_ctx *ctx, int dtype, uint16_t *KERN_RESTRICT dst,
                                       const float *KERN_RESTRICT src, int n, size_t inner,
                                       size_t src_nstride);
KERN_API int kern_ref_cast_lowp_f32_ns(struct kern_ctx *ctx, int dtype, float *KERN_RESTRICT dst,
                                       const uint16_t *KERN_RESTRICT src, int n, size_t inner,
                                       size_t dst_nstride, unsigned accum);

/* --- stream --- */
/* ---------------------------------------------------------------------------------------- */
/* Queues and events: uploads on a copy queue, overlapped with the ops                      */

/*
 * A context has two queues. KERN_QUEUE_COMPUTE is where every op, kern_mem_copy / _zero and
 * kern_graph_* run (on CUDA the context's stream, kern_cuda_ctx_stream). KERN_QUEUE_COPY is a
 * second queue for copies only (on CUDA a second non-blocking stream, made with the context), so
 * that an upload of the next batch runs on the copy engine while the step's kernels run. The
 * queues are ordered against each other only through events: kern_event_record marks the work
 * enqueued so far on a queue; kern_event_wait makes later work on a queue wait for it, on the
 * device (the host does not wait); kern_event_sync / kern_event_query let the host wait / look.
 * The usual pattern (trainer/data/loader.c), with COPY / COMPUTE for KERN_QUEUE_*:
 *   copy thread:  kern_mem_copy_on(ctx, COPY, dev, pinned, n, KERN_COPY_H2D);
 *                 kern_event_record(ctx, COPY, up);
 *   ops thread:   kern_event_wait(ctx, COMPUTE, up); ops reading dev ...
 *   copy thread:  kern_event_sync(up) before it rewrites `pinned`.
 *
 * CPU CONTEXTS. Everything is synchronous: kern_mem_copy_on copies before it returns (memmove,
 * as kern_mem_copy), record and wait do nothing, every event is always complete (query 1, sync
 * 0). So code written for the CUDA pattern runs unchanged, and its results are the same bytes.
 *
 * CUDA CONTEXTS. Events are cudaEventDisableTiming events of the context's device; record is
 * cudaEventRecord on the queue's stream, wait cudaStreamWaitEvent, sync cudaEventSynchronize,
 * query cudaEventQuery. A never-recorded event is complete. Re-recording an event replaces what
 * it marks; a wait or sync uses what it marked when the wait / sync was called.
 *
 * THREADS. The ops use a context from one thread at a time (kern.h THREADS); these calls are
 * freer, so that loader workers can upload the next batch during the step:
 *   - kern_mem_copy_on, kern_event_record and kern_event_wait on KERN_QUEUE_COPY may be called
 *     from other threads than the one running ops on ctx, concurrently with it (several threads
 *     may enqueue copies; their relative order on the queue is then the order of the calls);
 *   - kern_event_create / _destroy / _sync / _query: from any thread, any number at once;
 *   - KERN_QUEUE_COMPUTE calls belong to the thread running ops on ctx.
 * One event is not recorded by two threads at once, nor destroyed while another call uses it:
 * the caller orders those (the loader's mutex does). On CUDA these calls make ctx's device the
 * calling thread's current device when it is not. Failures are described, per thread, by
 * kern_stream_last_error(); COMPUTE-queue failures also by kern_cuda_ctx_last_error (which
 * belongs to the ops thread: COPY-queue failures do not write it).
 *
 * GRAPH CAPTURE (kern.h "Graphs") records the COMPUTE queue only. While a capture is running:
 *   - other threads may use the COPY queue and the host-side event calls freely (the capture's
 *     mode is thread-local): the loader keeps uploading;
 *   - inside the captured fn, kern_event_record / kern_event_wait on KERN_QUEUE_COMPUTE are
 *     refused on CUDA (-EIO, and the capture fails with -ENOTSUP; a CPU graph is a call, where
 *     they do nothing): a recorded event would mark the capture, not a replay, and a wait on an
 *     event recorded outside the graph would be frozen into it. So wait on the compute queue
 *     BEFORE kern_graph_capture / kern_graph_replay: the replay is enqueued after the wait,
 *     so the wait covers it. kern_mem_copy_on on
 *     KERN_QUEUE_COMPUTE is kern_mem_copy, with its capture rules. COPY-queue calls from inside
 *     fn are not part of the graph (they run once, at capture): do not make them there.
 */
enum { KERN_QUEUE_COMPUTE = 0, KERN_QUEUE_COPY = 1 };

struct kern_event;

/*
 * kern_mem_copy on the given queue: the same directions, argument checks and memory rules (see
 * kern_mem_copy). KERN_QUEUE_COMPUTE is exactly kern_mem_copy. On KERN_QUEUE_COPY of a CUDA
 * context: enqueued on the copy stream; a pinned source must stay unchanged until the copy
 * completes (record an event after it, kern_event_sync before rewriting the source); a pageable
 * source may be reused at once (the driver staged it); D2H waits for the copy queue, so dst is
 * readable on return. Errors: -EINVAL (NULL ctx, NULL dst or src with bytes > 0, a bad
 * direction or queue; nothing copied), -EIO / -ENOMEM (CUDA failure), -KERN_EBACKEND.
 */
KERN_API int kern_mem_copy_on(struct kern_ctx *ctx, int queue, void *dst, const void *src,
                              size_t bytes, int dir);

/*
 * Creates an event of ctx (of its backend and device) into *out, owned by the caller (free with
 * kern_event_destroy before ctx is destroyed). New events are complete. Errors: -EINVAL (NULL
 * ctx or out), -ENOMEM, -EIO (cudaEventCreateWithFlags failed), -KERN_EBACKEND.
 */
KERN_API int kern_event_create(struct kern_ctx *ctx, struct kern_event **out);

/* Destroys ev (NULL ok). Work it marks may still be pending: it completes regardless. */
KERN_API void kern_event_destroy(struct kern_event *ev);

/*
 * Marks in ev the work enqueued so far on ctx's `queue` (KERN_QUEUE_*). ev must be an event of
 * ctx. Errors: -EINVAL (NULL ctx or ev, bad queue, ev of another context), -EIO (CUDA failure,
 * or KERN_QUEUE_COMPUTE while it is being captured; see GRAPH CAPTURE).
 */
KERN_API int kern_event_record(struct kern_ctx *ctx, int queue, struct kern_event *ev);

/*
 * Makes work enqueued later on ctx's `queue` wait, on the device, until the work ev marks is
 * done; returns at once. ev may be an event of another context of the same backend (on CUDA,
 * also of another device). Errors: -EINVAL (NULL ctx or ev, bad queue), -KERN_EBACKEND (ev of
 * another backend), -EIO (CUDA failure, or KERN_QUEUE_COMPUTE while it is being captured).
 */
KERN_API int kern_event_wait(struct kern_ctx *ctx, int queue, struct kern_event *ev);

/*
 * The host waits until the work ev marks is done. Returns 0, -EINVAL (NULL ev) or -EIO (the
 * marked work failed, or a CUDA failure).
 */
KERN_API int kern_event_sync(struct kern_event *ev);

/* Whether the work ev marks is done: 1 yes, 0 not yet; -EINVAL (NULL ev), -EIO. Never waits. */
KERN_API int kern_event_query(struct kern_event *ev);

/*
 * The calling thread's description of its last failed call of this section ("" when none; a
 * thread-local buffer, valid until that thread's next failing call). Never NULL.
 */
KERN_API const char *kern_stream_last_error(void);

/* --- wcast --- */

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
    int (*sgd_step)(struct kern_ctx *, const struct kern_sgd *, float *, float *, float *,
                    const float *, const struct kern_optim_seg *, const double *, const int32_t *);
    int (*optim_sumsq)(struct kern_ctx *, double *, const float *, const struct kern_optim_seg *,
                       size_t, size_t);
    int (*ema_update)(struct kern_ctx *, float *, const float *, size_t, float, float);
    int (*amp_unscale)(struct kern_ctx *, float *, const struct kern_optim_seg *, size_t, size_t,
                       float, int32_t *);
    int (*cast_f32_bf16)(struct kern_ctx *, uint16_t *, const float *, size_t);
    int (*cast_bf16_f32)(struct kern_ctx *, float *, const uint16_t *, size_t);
    int (*cast_f32_f16)(struct kern_ctx *, uint16_t *, const float *, size_t);
    int (*cast_f16_f32)(struct kern_ctx *, float *, const uint16_t *, size_t);
    /* --- yololoss --- */
    int (*yolo_loss_scratch_size)(struct kern_ctx *, const struct kern_yolo_loss *, size_t *);
    int (*yolo_loss)(struct kern_ctx *, const struct kern_yolo_loss *, float *const *, float *,
                     const float *const *, const float *, const int *, void *, size_t, unsigned);
    /* --- augment --- */
    int (*aug_paste)(struct kern_ctx *, uint8_t *, const struct kern_aug_canvas *);
    int (*aug_warp)(struct kern_ctx *, uint8_t *, int, int, const uint8_t *, int, int,
                    const double *, int, uint8_t);
    int (*aug_hsv)(struct kern_ctx *, uint8_t *, int, int, const struct kern_aug_hsv_lut *);
    int (*aug_flip)(struct kern_ctx *, uint8_t *, int, int, int, int);
    int (*aug_mixup)(struct kern_ctx *, uint8_t *, const uint8_t *, size_t, double);
    int (*aug_to_nchw)(struct kern_ctx *, void *, int, const uint8_t *, int, int);
    int (*aug_batch)(struct kern_ctx *, void *, int, int, const struct kern_aug_sample *, int);
    /* --- graph --- */
    int (*ema_update_dyn)(struct kern_ctx *, float *, const float *, size_t,
                          const struct kern_sgd_dyn *);
    /* --- lowp --- */
    int (*conv2d_lowp_workspace_size)(struct kern_ctx *, const struct kern_conv2d_lowp *, size_t *);
    int (*conv2d_lowp_fwd)(struct kern_ctx *, const struct kern_conv2d_lowp *, void *, const void *,
                           const void *, const void *);
    int (*conv2d_lowp_bwd_data)(struct kern_ctx *, const struct kern_conv2d_lowp *, void *,
                                const void *, const void *, unsigned);
    int (*conv2d_lowp_bwd_filter)(struct kern_ctx *, const struct kern_conv2d_lowp *, float *,
                                  const void *, const void *, unsigned);
    int (*conv2d_lowp_bwd_bias)(struct kern_ctx *, const struct kern_conv2d_lowp *, float *,
                                const void *, unsigned);
    /* --- resadd --- */
    int (*bn_silu_add_fwd_train)(struct kern_ctx *, const struct kern_bn *, float *, float *,
                                 float *, float *, float *, const float *, const float *,
                                 const float *, const float *);
    int (*bn_silu_add_fwd_eval)(struct kern_ctx *, const struct kern_bn *, float *, const float *,
                                const float *, const float *, const float *, const float *,
                                const float *);
    int (*bn_silu_add_fwd_apply)(struct kern_ctx *, const struct kern_bn *, float *, float *,
                                 float *, float *, float *, const float *, const float *,
                                 const float *, const double *, const float *);
    /* --- stride --- */
    int (*upsample2x_ns_fwd)(struct kern_ctx *, float *, const float *, int, int, int, int, size_t,
                             size_t);
    int (*upsample2x_ns_bwd)(struct kern_ctx *, float *, const float *, int, int, int, int, size_t,
                             size_t, unsigned);
    int (*cast_f32_lowp_ns)(struct kern_ctx *, int, uint16_t *, const float *, int, size_t, size_t);
    int (*cast_lowp_f32_ns)(struct kern_ctx *, int, float *, const uint16_t *, int, size_t, size_t,
                            unsigned);
    /* --- stream --- */
    /* --- wcast --- */
};

/* The CPU reference table (kern_ref_*); its contexts are KERN_BACKEND_CPU. Never NULL. */
KERN_API const struct kern_ops *kern_ops_ref(void);

#ifdef __cplusplus
}
#endif

#endif
