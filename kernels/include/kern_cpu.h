/*
 * The CPU's fast passes (kernels/cpu/): blocked and SIMD versions of reference ops, for the CPU
 * oneDNN executor (trainer/model/net_onednn.c), whose convolutions read and write oneDNN's
 * channel-blocked layouts (nChw16c with AVX-512, nChw8c with AVX2). kernels/ref keeps the
 * readable references; each row of the table below gives the bits (or, for the BN sums, the
 * arithmetic) of the reference op it speeds up, and tests/kernels checks every row against that
 * reference.
 *
 * Plain functions, not ops: no kern context and no threads of their own. Each call covers one
 * slice (an image's channel block, or an (image, anchor) pair), so that the executor splits the
 * calls over its own threads; results do not depend on how.
 */
#ifndef KERN_CPU_H
#define KERN_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kern.h"

/* BN + SiLU on channel blocks. */
/*
 * The training BN + SiLU (+ residual) on a channel-blocked layout (oneDNN's nChw16c and nChw8c),
 * for the CPU oneDNN executor (trainer/model/net_onednn.c), whose convolutions read and write
 * that layout. Plain functions, not ops: no threads of their own. A tensor is n images of
 * cpad / blk channel blocks (cpad: c rounded up to whole blocks), each block hw positions of
 * blk lanes: slice s = image * (cpad / blk) + block starts at s * hw * blk, lane l is channel
 * block * blk + l. The per-slice passes touch only their slice and its sums, so a caller runs
 * them on its threads in any order; the merges (_sums, _coef) add the slices in image order, so
 * results do not depend on the thread count. Arithmetic as the NCHW ops (ref/kern_bn.c): the
 * same sigmoid, z = x a + b forward, z recomputed as xhat gamma + beta backward; sums in float
 * over L1-sized chunks, merged in double (the forward's moments of values shifted by the lane's
 * first, pairwise, Chan et al.).
 *
 *   forward:  bnblk_moments(s) for every slice; bnblk_fwd_coef(NULL) (the slices
 *             merged pairwise); bnblk_silu_fwd(s) for every slice: y = silu(x a + b) (+ r)
 *   backward: bnblk_silu_bwd_sums(s) for every slice, which also gives the residual its
 *             share when rdx != NULL (rdx = dy, or rdx += dy with radd); bnblk_bwd_sums
 *             (dgamma += sum dz xhat, dbeta += sum dz); bnblk_bwd_coef;
 *             bnblk_silu_bwd_dx(s) for every slice: dx = k (dz - m1 - xhat m2),
 *             dz = dy silu'(xhat gamma + beta)
 * SyncBatchNorm: the sums buffers are kern.h's "Batch norm in phases" (KERN_BN_SUMS_LEN(c)
 * doubles: (sum x, sum x^2, n hw) from bnblk_fwd_sums, (sum dz, sum dz xhat, n hw) from
 * bnblk_bwd_sums), which a caller sums over its ranks before bnblk_fwd_coef(sums) and
 * bnblk_bwd_coef; their arithmetic is kern_ref_bn_stats' and _fwd_apply's (sum x^2 formed
 * as M2 + N mean^2 from the local pairwise merge). dgamma and dbeta stay the local batch's.
 *
 * r and rdx are dense; y and dy may be a channel slice of a wider tensor (a concat's: the
 * producer writes it in place), their images y_nstride floats apart (0: dense); x and dx
 * likewise, x_nstride apart (a slice of one conv's output that two BNs share: C3's cv1 and cv2
 * run as one conv).
 * The per-channel arrays hold cpad floats each; the pad lanes must be zero (calloc), and stay
 * so: their outputs and gradients are then zero. y, dx, rdx never overlap an input. blk is 8
 * or 16.
 */
struct kern_bnblk {
    int n, c, cpad, blk; /* images, channels, channels padded to whole blocks, lanes per block */
    size_t hw;           /* positions per slice */
    size_t y_nstride;    /* floats from one image to the next in y and dy; 0: cpad * hw */
    size_t x_nstride;    /* the same in x and dx */
    float eps;
    /* per channel: the batch mean, biased variance, invstd = 1 / sqrt(var + eps), gamma and
       beta as of the forward, a = gamma invstd, b = beta - mean a (fwd_coef); k = gamma invstd,
       m1 = sum dz / N, m2 = sum dz xhat / N over the batch, N = n hw or the summed count
       (bwd_coef) */
    float *mean, *var, *invstd, *gamma, *beta, *a, *b, *k, *m1, *m2;
    double *s1, *s2; /* per slice and lane (n * cpad each): mean and M2, or sum dz and dz xhat */
};

/*
 * Max pool on one channel-blocked plane (the CPU oneDNN executor's layout, as struct kern_bnblk's
 * above: h w positions of blk lanes, blk 8 or 16), stride 1, pad k / 2, odd k up to
 * KERN_POOLBLK_MAX_K, rows up to KERN_POOLBLK_MAX_W wide: SPPF's pools. Plain functions with no
 * threads: one (image, channel block) plane per call, so that a caller splits them over its own.
 * poolblk_fwd: y and, unless idx is NULL, each output lane's winner as its offset in the
 *   window, kh k + kw; the rule of kern_ref_maxpool2d_fwd, so y is its y bit for bit and idx
 *   names the element its idx does.
 * poolblk_bwd: dx from dy and the forward's idx: each element the sum of the dy that chose
 *   it, added in row-major output order from 0 (kern_ref_maxpool2d_bwd's bits); with add, that
 *   sum added to dx (PyTorch's sum of two gradients of one tensor).
 * Returns 0, or -EINVAL (a bad shape, k, blk, or NULL).
 */
#define KERN_POOLBLK_MAX_K 15
#define KERN_POOLBLK_MAX_W 256

/*
 * Nearest x2 upsample on one channel-blocked plane (as kern_poolblk's: one (image, channel
 * block) per call, blk 8 or 16). upblk_fwd: x (h, w, blk) -> y (2h, 2w, blk), each lane
 * kern_ref_upsample2x_fwd's. upblk_bwd: dx (h, w, blk) the sum of dy's 2x2 block in
 * kern_ref_upsample2x_bwd's order (the same bits), or with add that sum added to dx.
 * Returns 0, or -EINVAL (a bad shape, blk, or NULL).
 */

/*
 * The training reshape on a channel-blocked raw (the CPU oneDNN executor's layout, as
 * struct kern_bnblk's above: per image cpad / blk blocks of ny nx positions by blk lanes, channel
 * a no + k at block (a no + k) / blk, lane (a no + k) % blk, cpad = na no rounded up to whole
 * blocks; blk 8 or 16). Plain functions with no threads: one (image, anchor) or (image, block)
 * per call, so that a caller splits them over its own. Copies only: p and draw are bit for bit
 * kern_ref_detect_reshape_fwd / _bwd's on the same numbers, without the NCHW tensor between.
 * detect_blk_fwd: p's (b, a) block from raw (bases of the whole tensors).
 * detect_blk_bwd: block cb of image b of raw's gradient draw from dp (overwritten; pad
 *   lanes 0).
 */
/*
 * The inference decode (kern_ref_detect_decode) on a channel-blocked raw, as the two above: one
 * (image b, anchor a) per call, out that pair's ny nx rows of no (where the caller wants them),
 * raw the whole tensor, anchors the level's na (w, h) pairs. The same bits as
 * kern_ref_detect_decode on the NCHW copy of raw. Returns 0, -EINVAL (no above
 * KERN_DETECT_BLK_MAX_NO, a bad shape or NULL).
 */
#define KERN_DETECT_BLK_MAX_NO 4096

/*
 * aug_sample: one sample's pixels on the calling thread, host memory only: the oh x ow output (oh =
 * ow = s is image i of kern_ref_aug_batch, byte for byte; a letterboxed sample of rect training may
 * be any shape) written to dst as 3 planes of oh * ow elements, uint8 or float / 255 (dtype). Tiles
 * are read in place (no canvas is built). Uses no context: any number of threads may call it at
 * once. Returns 0, or -EINVAL (NULL pointers, sizes, an invalid sample or LUT).
 */

/*
 * The rows, one per pass, in kern_cpu_ops.def (KERN_CPU_OP(ret, name, params), X-macro as
 * kern_ops.def): kern_cpu_NAME is the function (internal to kernels/cpu), struct kern_cpu_ops
 * has one member per row, and tests/kernels/test_op_list.c fails until a new row has its
 * parity test against the reference op it names.
 */
struct kern_cpu_ops {
#define KERN_CPU_OP(ret, name, params) ret(*name) params;
#include "kern_cpu_ops.def"
#undef KERN_CPU_OP
};

/* The table: every row set, never NULL. */
KERN_API const struct kern_cpu_ops *kern_ops_cpu(void);

#endif /* KERN_CPU_H */
