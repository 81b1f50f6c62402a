/*
 * The op list (kernels/include/kern_ops.def) against what is built from it and what tests it:
 *   - both backend tables hold, member by member, the function of the member's name
 *     (kern_ops_ref()->X == kern_ref_X; in CUDA builds kern_ops_cuda()->X == kern_cuda_X), so a
 *     table can never call one op for another; no GPU is needed to check it;
 *   - every op has a row in the parity table below naming the CUDA parity suite that compares
 *     its twin with the reference, and that suite's sources exercise it (the source mentions
 *     kern_cuda_X, K->X or .X). A new op in kern_ops.def fails here until it has its row and
 *     its parity case;
 *   - the CPU's fast passes (kern_cpu_ops.def, kernels/cpu/) likewise: every member of
 *     kern_ops_cpu() is set, and every row has a row below naming the test that checks it and
 *     the reference op it is checked against, and that test calls both (->X and kern_ref_REF).
 * Usage: test_op_list TESTS_KERNELS_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffyolo_config.h"
#include "kern.h"
#include "kern_cuda.h"
#include "tap.h"

#define KERN_OP(name, params) #name,
static const char *const ops[] = {
#include "kern_ops.def"
};
#undef KERN_OP
#define N_OPS (sizeof ops / sizeof ops[0])

/* Which parity suite (tests/kernels/<file>) checks each op's CUDA twin against the reference. */
static const struct {
    const char *op, *file;
} parity[] = {
    { "conv2d_workspace_size", "test_cuda_parity.c" },
    { "conv2d_fwd", "test_cuda_parity.c" },
    { "conv2d_bwd_data", "test_cuda_parity.c" },
    { "conv2d_bwd_filter", "test_cuda_parity.c" },
    { "conv2d_bwd_bias", "test_cuda_parity.c" },
    { "conv2d_lowp_workspace_size", "test_cuda_parity_conv_lowp.c" },
    { "conv2d_lowp_fwd", "test_cuda_parity_conv_lowp.c" },
    { "conv2d_lowp_bwd_data", "test_cuda_parity_conv_lowp.c" },
    { "conv2d_lowp_bwd_filter", "test_cuda_parity_conv_lowp.c" },
    { "conv2d_lowp_bwd_bias", "test_cuda_parity_conv_lowp.c" },
    { "bn_fwd_train", "test_cuda_parity.c" },
    { "bn_fwd_eval", "test_cuda_parity.c" },
    { "bn_bwd", "test_cuda_parity.c" },
    { "silu_fwd", "test_cuda_parity.c" },
    { "silu_bwd", "test_cuda_parity.c" },
    { "bn_silu_fwd_train", "test_cuda_parity.c" },
    { "bn_silu_fwd_eval", "test_cuda_parity.c" },
    { "bn_silu_bwd", "test_cuda_parity.c" },
    { "bn_stats", "test_cuda_parity.c" },
    { "bn_fwd_apply", "test_cuda_parity.c" },
    { "bn_silu_fwd_apply", "test_cuda_parity.c" },
    { "bn_bwd_reduce", "test_cuda_parity.c" },
    { "bn_silu_bwd_reduce", "test_cuda_parity.c" },
    { "bn_bwd_apply", "test_cuda_parity.c" },
    { "bn_silu_bwd_apply", "test_cuda_parity.c" },
    { "bn_silu_add_fwd_train", "test_cuda_parity_resadd.c" },
    { "bn_silu_add_fwd_eval", "test_cuda_parity_resadd.c" },
    { "bn_silu_add_fwd_apply", "test_cuda_parity_resadd.c" },
    { "conv2d_bn_silu_fwd_eval", "test_cuda_parity_resadd.c" },
    { "bnx_stats", "test_cuda_parity_bnx.c" },
    { "bnx_silu_apply", "test_cuda_parity_bnx.c" },
    { "bnx_silu_bwd_reduce", "test_cuda_parity_bnx.c" },
    { "bnx_silu_bwd_apply", "test_cuda_parity_bnx.c" },
    { "maxpool16_fwd", "test_cuda_parity_bnx.c" },
    { "maxpool16_bwd", "test_cuda_parity_bnx.c" },
    { "upsample16_fwd", "test_cuda_parity_bnx.c" },
    { "upsample16_bwd", "test_cuda_parity_bnx.c" },
    { "copy16", "test_cuda_parity_bnx.c" },
    { "cast_f32_lowp_cl", "test_cuda_parity_bnx.c" },
    { "cast_f32_lowp_s2d", "test_cuda_parity_bnx.c" },
    { "detect16_fwd", "test_cuda_parity_bnx.c" },
    { "detect16_bwd", "test_cuda_parity_bnx.c" },
    { "maxpool2d_fwd", "test_cuda_parity.c" },
    { "maxpool2d_bwd", "test_cuda_parity.c" },
    { "upsample2x_fwd", "test_cuda_parity.c" },
    { "upsample2x_bwd", "test_cuda_parity.c" },
    { "concat_fwd", "test_cuda_parity.c" },
    { "concat_bwd", "test_cuda_parity.c" },
    { "add_fwd", "test_cuda_parity.c" },
    { "add_bwd", "test_cuda_parity.c" },
    { "detect_reshape_fwd", "test_cuda_parity.c" },
    { "detect_reshape_bwd", "test_cuda_parity.c" },
    { "detect_decode", "test_cuda_parity.c" },
    { "s2d_fwd", "test_cuda_parity.c" },
    { "s2d_bwd", "test_cuda_parity.c" },
    { "s2d_weight_fwd", "test_cuda_parity.c" },
    { "s2d_weight_bwd", "test_cuda_parity.c" },
    { "upsample2x_ns_fwd", "stride_testutil.h" },
    { "upsample2x_ns_bwd", "stride_testutil.h" },
    { "bce_logits_fwd", "test_cuda_parity.c" },
    { "bce_logits_bwd", "test_cuda_parity.c" },
    { "ciou_fwd", "test_cuda_parity.c" },
    { "ciou_bwd", "test_cuda_parity.c" },
    { "yolo_loss_scratch_size", "test_cuda_parity_yolo_loss.c" },
    { "yolo_loss", "test_cuda_parity_yolo_loss.c" },
    { "sgd_step", "test_cuda_parity_optim.c" },
    { "optim_sumsq", "test_cuda_parity_optim.c" },
    { "ema_update", "test_cuda_parity_optim.c" },
    { "ema_update_dyn", "test_cuda_parity_graph.c" },
    { "amp_unscale", "test_cuda_parity_optim.c" },
    { "cast_f32_bf16", "test_cuda_parity_optim.c" },
    { "cast_bf16_f32", "test_cuda_parity_optim.c" },
    { "cast_f32_f16", "test_cuda_parity_optim.c" },
    { "cast_f16_f32", "test_cuda_parity_optim.c" },
    { "cast_f32_lowp_ns", "stride_testutil.h" },
    { "cast_lowp_f32_ns", "stride_testutil.h" },
    { "aug_paste", "test_cuda_parity_augment.c" },
    { "aug_warp", "test_cuda_parity_augment.c" },
    { "aug_hsv", "test_cuda_parity_augment.c" },
    { "aug_flip", "test_cuda_parity_augment.c" },
    { "aug_mixup", "test_cuda_parity_augment.c" },
    { "aug_to_nchw", "test_cuda_parity_augment.c" },
    { "aug_batch", "test_cuda_parity_augment.c" },
};
#define N_PARITY (sizeof parity / sizeof parity[0])

#define KERN_CPU_OP(ret, name, params) #name,
static const char *const cpu_rows[] = {
#include "kern_cpu_ops.def"
};
#undef KERN_CPU_OP
#define N_CPU (sizeof cpu_rows / sizeof cpu_rows[0])

/* Which test (tests/kernels/<file>) checks each fast pass, and against which reference op. */
static const struct {
    const char *row, *file, *ref;
} cpu_parity[] = {
    { "bnblk_moments", "test_bn_blk.c", "bn_silu_fwd_train" },
    { "bnblk_fwd_sums", "test_bn_blk.c", "bn_silu_fwd_train" },
    { "bnblk_fwd_coef", "test_bn_blk.c", "bn_silu_fwd_train" },
    { "bnblk_silu_fwd", "test_bn_blk.c", "bn_silu_fwd_train" },
    { "bnblk_silu_bwd_sums", "test_bn_blk.c", "bn_silu_bwd" },
    { "bnblk_bwd_sums", "test_bn_blk.c", "bn_silu_bwd" },
    { "bnblk_bwd_coef", "test_bn_blk.c", "bn_silu_bwd" },
    { "bnblk_silu_bwd_dx", "test_bn_blk.c", "bn_silu_bwd" },
    { "poolblk_fwd", "test_pool_upsample.c", "maxpool2d_fwd" },
    { "poolblk_bwd", "test_pool_upsample.c", "maxpool2d_bwd" },
    { "upblk_fwd", "test_pool_upsample.c", "upsample2x_fwd" },
    { "upblk_bwd", "test_pool_upsample.c", "upsample2x_bwd" },
    { "detect_blk_fwd", "test_detect_head.c", "detect_reshape_fwd" },
    { "detect_blk_bwd", "test_detect_head.c", "detect_reshape_bwd" },
    { "detect_blk_decode", "test_detect_head.c", "detect_decode" },
    { "aug_sample", "test_augment_ops.c", "aug_warp" },
};
#define N_CPU_PARITY (sizeof cpu_parity / sizeof cpu_parity[0])

/* The member functions of a table, in kern_ops.def order. */
static void members(const struct kern_ops *K, void (**out)(void))
{
    size_t k = 0;
#define KERN_OP(name, params) out[k++] = (void (*)(void))K->name;
#include "kern_ops.def"
#undef KERN_OP
}

static char *slurp(const char *dir, const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

/* Does text call op: kern_cuda_op, ->op or .op, not followed by an identifier character? */
static int mentions(const char *text, const char *op)
{
    static const char *const pre[] = { "kern_cuda_", "->", "." };
    for (size_t p = 0; p < 3; p++) {
        char pat[96];
        snprintf(pat, sizeof pat, "%s%s", pre[p], op);
        for (const char *s = strstr(text, pat); s; s = strstr(s + 1, pat)) {
            const char c = s[strlen(pat)];
            if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("Bail out! usage: test_op_list TESTS_KERNELS_DIR\n");
        return 99;
    }
    void (*got[N_OPS])(void);
    void (*want[N_OPS])(void);
    size_t k = 0;
#define KERN_OP(name, params) want[k++] = (void (*)(void))kern_ref_##name;
#include "kern_ops.def"
#undef KERN_OP
    members(kern_ops_ref(), got);
    int same = 0;
    for (k = 0; k < N_OPS; k++)
        same += got[k] == want[k];
    is_int(same, (int)N_OPS, "kern_ops_ref(): every member is kern_ref_ of its name (%zu ops)",
           (size_t)N_OPS);
    ok(kern_ops_ref()->backend == KERN_BACKEND_CPU, "the reference table's backend");
#if HAVE_CUDA
    k = 0;
#define KERN_OP(name, params) want[k++] = (void (*)(void))kern_cuda_##name;
#include "kern_ops.def"
#undef KERN_OP
    members(kern_ops_cuda(), got);
    same = 0;
    for (k = 0; k < N_OPS; k++)
        same += got[k] == want[k];
    is_int(same, (int)N_OPS, "kern_ops_cuda(): every member is kern_cuda_ of its name");
    ok(kern_ops_cuda()->backend == KERN_BACKEND_CUDA, "the CUDA table's backend");
#else
    ok(kern_ops_cuda() == NULL, "no CUDA in this build: kern_ops_cuda() is NULL");
#endif
    int rows = 0, exercised = 0;
    for (k = 0; k < N_OPS; k++) {
        size_t r = 0;
        while (r < N_PARITY && strcmp(parity[r].op, ops[k]))
            r++;
        if (r == N_PARITY) {
            tap_diag("%s: no parity row", ops[k]);
            continue;
        }
        rows++;
        char *text = slurp(argv[1], parity[r].file);
        if (text && mentions(text, ops[k]))
            exercised++;
        else
            tap_diag("%s: %s does not exercise it", ops[k], parity[r].file);
        free(text);
    }
    is_int(rows, (int)N_OPS, "every op of kern_ops.def has a parity row");
    is_int(exercised, (int)N_OPS, "and its parity suite exercises its CUDA twin");
    int known = 0;
    for (size_t r = 0; r < N_PARITY; r++)
        for (k = 0; k < N_OPS; k++)
            known += !strcmp(parity[r].op, ops[k]);
    is_int(known, (int)N_PARITY, "every row names an op of the list, once");

    const struct kern_cpu_ops *C = kern_ops_cpu();
    void (*cpu[N_CPU])(void);
    k = 0;
#define KERN_CPU_OP(ret, name, params) cpu[k++] = (void (*)(void))C->name;
#include "kern_cpu_ops.def"
#undef KERN_CPU_OP
    int set = 0;
    for (k = 0; k < N_CPU; k++)
        set += cpu[k] != NULL;
    is_int(set, (int)N_CPU, "kern_ops_cpu(): every row is set (%zu rows)", (size_t)N_CPU);
    is_int((int)(sizeof *C / sizeof(void (*)(void))), (int)N_CPU,
           "struct kern_cpu_ops has exactly the rows of kern_cpu_ops.def");
    rows = exercised = 0;
    for (k = 0; k < N_CPU; k++) {
        size_t r = 0;
        while (r < N_CPU_PARITY && strcmp(cpu_parity[r].row, cpu_rows[k]))
            r++;
        if (r == N_CPU_PARITY) {
            tap_diag("%s: no parity row", cpu_rows[k]);
            continue;
        }
        rows++;
        char *text = slurp(argv[1], cpu_parity[r].file);
        char ref[96], call[96];
        snprintf(ref, sizeof ref, "kern_ref_%s(", cpu_parity[r].ref);
        snprintf(call, sizeof call, "->%s(", cpu_rows[k]);
        if (text && strstr(text, ref) && strstr(text, call))
            exercised++;
        else
            tap_diag("%s: %s does not call it and %s", cpu_rows[k], cpu_parity[r].file, ref);
        free(text);
    }
    is_int(rows, (int)N_CPU, "every row of kern_cpu_ops.def has a parity row");
    is_int(exercised, (int)N_CPU, "and its test calls it and the reference it is checked against");
    known = 0;
    for (size_t r = 0; r < N_CPU_PARITY; r++)
        for (k = 0; k < N_CPU; k++)
            known += !strcmp(cpu_parity[r].row, cpu_rows[k]);
    is_int(known, (int)N_CPU_PARITY, "every parity row names a row of kern_cpu_ops.def, once");
    return tap_done();
}
