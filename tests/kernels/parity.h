/*
 * The CUDA parity suites (tests/kernels/test_cuda_parity*.c), one per op family, each comparing
 * the kern_cuda_* twins with the kern_ref_* references on the same inputs. One program,
 * test_cuda_ops.c, runs them from its table over one harness (cuda_testutil.h: the contexts,
 * device buffers, the skip without a device, --seed); its units share the TAP stream, the draws
 * and the contexts (TESTS_SHARED_STATE). A new op is a row in its family header
 * (kernels/include/kern_ops.def), a parity case in its family's suite, and a row in
 * test_op_list.c's parity table. bench: --bench was given (the suites that have a benchmark run
 * it instead of the checks).
 */
#ifndef PARITY_H
#define PARITY_H

void parity_ops(int bench);   /* conv2d, BN, SiLU, pool, upsample, concat, add, Detect, BCE, CIoU */
void parity_optim(int bench); /* SGD, sum of squares, EMA, AMP unscale, casts */
void parity_yolo_loss(int bench); /* the whole YOLOv5 loss */
void parity_augment(int bench);   /* mosaic paste, warp, HSV, flips, mixup, the batch tensor */
void parity_graph(int bench);     /* a step captured as a CUDA graph, ema_update_dyn */
void parity_conv_lowp(int bench); /* reduced-precision conv2d */
void parity_resadd(int bench);    /* BN + SiLU + residual add */
void parity_stride(int bench);    /* channel slices: upsample and casts */
void parity_sgd_lowp(int bench);  /* SGD writing the 16-bit parameter copy */
void parity_bnx(int bench);       /* bf16 activations, NCHW or NHWC: BN + SiLU, pool, upsample */

#endif
