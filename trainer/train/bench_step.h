/*
 * The training step alone, timed on synthetic batches (`yolo-train --bench`): no records, no
 * loader, so that the GPU step (or the CPU reference) is measured by itself and compared with
 * PyTorch's on the same model, image size and batch (scripts/bench-train).
 *
 * One step is what trainer/train/train.c does per batch: forward (training BN), the YOLOv5 loss and
 * its gradient, backward, gradient clipping + SGD (nesterov, weight decay, the recipe's groups)
 * and the EMA update. Images are uniform noise and targets a fixed random set of boxes per
 * image (the loss then does real build_targets work); both are drawn once from the seed.
 *
 * On a device (or the device data path) the step is train.c's resident step: the batch is uploaded
 * once (in the stem's bf16 space-to-depth layout where the net takes it, as yolo-train's GPU
 * augmentation delivers it), then forward, the device loss (trn_loss_compute_dev), backward into
 * the device gradient arena, trn_optim_dev_step (clip + SGD + the parameters' EMA in one pass), the
 * buffers' EMA and zero grad run on the net's context with nothing copied per step but the 8 loss
 * floats. Each phase ends with a stream sync so that its time is its own.
 */
#ifndef TRN_BENCH_STEP_H
#define TRN_BENCH_STEP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct trn_bench_step_opts {
    const char *cfg; /* model yaml path (trn_model_load) */
    int img;         /* square input size, a multiple of the model's largest stride */
    int batch;       /* images per step, >= 1 */
    int device;      /* -1: CPU reference ops; >= 0: CUDA device */
    int threads;     /* CPU: kern threads (trn_net_opts.threads) */
    int warmup;      /* steps run before timing (cuDNN picks algorithms there), >= 0 */
    int steps;       /* timed steps, >= 1 */
    int boxes;       /* target boxes per image, >= 0 */
    uint64_t seed;
    int device_path; /* tests: the resident step on the CPU ops (trn_net_opts.device_path) */
    int cuda_graph;  /* resident: the step (forward, loss, backward, SGD + EMA) captured once as a
                        graph (kern_graph_*) after one direct step and replayed for the timed
                        steps (warmup then at least 2: the direct step and the capture); the
                        same updates as the direct step, so the same loss */
    int any_algo;    /* GPU: kern_ctx_opts.any_algo (non-deterministic cuDNN algorithms allowed) */
    const char *cudnn_plan; /* GPU: the conv plan file (plans.h), or NULL */
    int cudnn_tune;         /* GPU: time what the plan file lacks, write it back */
    int amp;        /* the net's convs (trn_net_opts.amp): KERN_DT_F32 [default], KERN_DT_BF16,
                       KERN_DT_F16 (timing only: no loss scaler, the loss gradient unscaled) */
    int cpu_engine; /* CPU: what runs the step (trn_net_opts.cpu_engine), as in yolo-train
                       [TRN_CPU_ENGINE_AUTO] */
    int act_store;  /* the activations between layers (trn_net_opts.act_store) [TRN_ACT_F32] */
};

/* Defaults: img 640, batch 16, CPU, threads 0, warmup 3, steps 10, 8 boxes, seed 0. */
void trn_bench_step_opts_default(struct trn_bench_step_opts *o);

/* Phase times are means over the timed steps, in milliseconds. On the resident step the batch
 * is on the device before the first step (as PyTorch's bench keeps it), ms_loss includes the
 * loss floats' download, ms_optimizer the fused EMA of the parameters, and ms_ema the buffers'
 * EMA alone. */
struct trn_bench_step_result {
    double img_per_s;    /* batch / mean step time */
    double ms_step;      /* whole step */
    double ms_forward;   /* parameter upload (GPU), forward, outputs back to the host */
    double ms_loss;      /* build_targets, loss and its gradient (host) */
    double ms_backward;  /* gradients to the device (GPU), backward, gradients back */
    double ms_optimizer; /* clipping, SGD */
    double ms_ema;       /* EMA update */
    double gflops_img;   /* forward GFLOPs per image at img (ultralytics' count) */
    double tflops;       /* achieved: 3 x forward FLOPs x batch / step time (backward ~ 2x) */
    size_t net_bytes;    /* memory the net holds (activations, gradients, workspace, copies) */
    int on_device;       /* the net ran on a CUDA device */
    long long params;    /* parameter count */
    double loss;         /* the last step's total loss (a finite number says the step is real) */
    int resident;        /* the resident step ran (device or device data path) */
    size_t peak_bytes;   /* resident: every byte of backend memory the step holds (net,
                            momentum, EMA, loss scratch, targets, output gradients), all
                            allocated before the first step, so also the peak; else net_bytes */
    int threads;         /* compute threads per op (the net's context) */
    int blas_threads;    /* threads a BLAS call would use during the steps (kern_blas_threads) */
    int os_threads;      /* the process's threads after the timed steps (trn_cli_os_threads) */
    int graph;           /* the timed steps were graph replays (cuda_graph): ms_step is the whole
                            step (batch and scalars up, one replay, loss floats down) and the
                            phase times are 0 (one launch has no phases) */
    char engine[32];     /* what ran the step (trn_net_engine) */
    char input[24];      /* the batch the step reads: "float32", or on the resident step of a net
                            that takes it (net.h THE STEM'S INPUT) "bf16 s2d NHWC" / "NCHW", as
                            yolo-train's GPU augmentation writes it */
    uint64_t plan_hash;  /* GPU: kern_plan_hash of the conv passes planned (0 on the CPU) */
    int plan_counts[3];  /* GPU: those passes by how they were chosen (KERN_PLAN_HOW_*) */
};

/*
 * Build the model, a net on o->device, the loss, optimizer and EMA; run warmup + steps steps;
 * fill *r. err/err_cap: a one-line message on failure. Returns 0, -EINVAL (bad options), or the
 * failing module's code (model, net, loss, optimizer), with err saying which.
 */
int trn_bench_step_run(const struct trn_bench_step_opts *o, struct trn_bench_step_result *r,
                       char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
