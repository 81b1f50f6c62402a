/*
 * conv_probe: every cuDNN algorithm of every convolution pass of a model, timed once, for
 * scripts/gpu-check's conv-probe step (issue 41: do deterministic weight gradients cost much,
 * and what do the untimed heuristics give away against a timed search?).
 *
 *     conv_probe MODEL.yaml [IMG 640] [BATCH 64] [bf16|f16|f32] [nhwc|nchw]
 *
 * The shapes are the model's own (trn_model_plan at BATCH x 3 x IMG x IMG; in NHWC the stem as the
 * bf16 executor runs it, a 3x3 conv of a 16-channel space-to-depth), each distinct shape
 * probed once (kern_cuda_conv2d_probe: the heuristics' ranked list, then cudnnFind* over every
 * algorithm) and weighted by how often the step runs it. One JSON line per (shape, pass): both
 * lists and what each rule picks (kern_plan_pick over the heuristics: the default; over Find:
 * --cudnn-tune; any: --cudnn-any-algo), each pick with its Find time. The last line sums the
 * picks' times per pass over the step: {"summary": ...}. Exit 77 without a CUDA device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_plan.h"
#include "model.h"

/* Find's time of algo in f[0..n) (what the step would spend with it), or -1. */
static double find_ms(const struct kern_plan_cand *f, int n, int algo)
{
    for (int i = 0; i < n; i++)
        if (f[i].algo == algo && f[i].ok) return f[i].ms;
    return -1;
}

/* Field by field: the struct has padding before x_nstride. */
static int same(const struct kern_conv2d *a, const struct kern_conv2d *b)
{
    return a->n == b->n && a->c_in == b->c_in && a->h_in == b->h_in && a->w_in == b->w_in &&
           a->c_out == b->c_out && a->k_h == b->k_h && a->k_w == b->k_w &&
           a->stride_h == b->stride_h && a->stride_w == b->stride_w && a->pad_h == b->pad_h &&
           a->pad_w == b->pad_w && a->x_nstride == b->x_nstride;
}

static void print_list(const char *name, const struct kern_plan_cand *c, int n)
{
    printf("\"%s\": [", name);
    for (int i = 0; i < n; i++)
        printf(
            "%s{\"algo\": %d, \"math\": %d, \"det\": %d, \"ok\": %d, \"mem\": %zu, \"ms\": %.4f}",
            i ? ", " : "", c[i].algo, c[i].math, c[i].det, c[i].ok && c[i].math_ok, c[i].memory,
            c[i].ms);
    printf("]");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: conv_probe MODEL.yaml [IMG] [BATCH] [bf16|f16|f32] [nhwc|nchw]\n");
        return 2;
    }
    const int img = argc > 2 ? atoi(argv[2]) : 640, batch = argc > 3 ? atoi(argv[3]) : 64;
    const char *dts = argc > 4 ? argv[4] : "bf16", *lys = argc > 5 ? argv[5] : "nhwc";
    const int dtype = !strcmp(dts, "f32")   ? KERN_DT_F32
                      : !strcmp(dts, "f16") ? KERN_DT_F16
                                            : KERN_DT_BF16;
    const int layout = !strcmp(lys, "nchw") ? KERN_LAYOUT_NCHW : KERN_LAYOUT_NHWC;
    char err[256] = "";
    struct trn_model *m;
    if (trn_model_load(argv[1], NULL, &m, err, sizeof err) < 0) {
        fprintf(stderr, "conv_probe: %s\n", err);
        return 1;
    }
    struct trn_act_plan P;
    if (trn_model_plan(m, batch, img, img, &P, err, sizeof err) < 0) {
        fprintf(stderr, "conv_probe: plan: %s\n", err);
        return 1;
    }
    /* distinct shapes, with how many convs of the step run each */
    const int nc = trn_model_info(m)->n_convs;
    struct kern_conv2d *shape = calloc((size_t)nc, sizeof(*shape));
    int *uses = calloc((size_t)nc, sizeof(int)), ns = 0;
    for (int i = 0; i < nc; i++) {
        const struct trn_conv *cv = trn_model_conv(m, i);
        const struct trn_act *x = &P.acts[P.convs[i].in];
        struct kern_conv2d d;
        kern_conv2d_init(&d, x->n, x->c, x->h, x->w, cv->c2, cv->k, cv->s, cv->p);
        /* NHWC is the bf16 executor's layout, which runs the 6x6 stride-2 stem as the 3x3 conv
         * of the images' 16-channel space-to-depth (net_exec_x16.c THE STEM) */
        if (layout == KERN_LAYOUT_NHWC && P.convs[i].in == 0 && cv->k == 6 && cv->s == 2 &&
            cv->p == 2 && x->h % 2 == 0 && x->w % 2 == 0 && 4 * x->c <= 16)
            kern_conv2d_init(&d, x->n, 16, x->h / 2, x->w / 2, cv->c2, 3, 1, 1);
        int j = 0;
        while (j < ns && !same(&shape[j], &d))
            j++;
        if (j == ns) shape[ns++] = d;
        uses[j]++;
    }
    /* without a device: the shapes it would probe, then the skip */
    if (kern_cuda_device_count() < 1) {
        for (int j = 0; j < ns; j++)
            printf("# shape n%d c%d %dx%d -> %d k%d s%d p%d, %d uses\n", shape[j].n, shape[j].c_in,
                   shape[j].h_in, shape[j].w_in, shape[j].c_out, shape[j].k_h, shape[j].stride_h,
                   shape[j].pad_h, uses[j]);
        printf("# SKIP no CUDA device (%d convs, %d shapes)\n", nc, ns);
        free(shape);
        free(uses);
        trn_act_plan_free(&P);
        trn_model_destroy(m);
        return 77;
    }
    struct kern_ctx_opts ko;
    kern_ctx_opts_default(&ko);
    ko.backend = KERN_BACKEND_CUDA;
    struct kern_ctx *ctx;
    int rc = kern_ctx_create(&ko, &ctx);
    if (rc < 0) {
        fprintf(stderr, "conv_probe: CUDA context: %s\n", kern_strerror(rc));
        return 1;
    }
    /* per pass: the step's ms under each rule (heuristic deterministic = the default, Find
     * deterministic = --cudnn-tune, Find any = --cudnn-tune --cudnn-any-algo, heuristic any =
     * --cudnn-any-algo) */
    double tot[3][4] = { { 0 } };
    int unknown = 0;
    for (int j = 0; j < ns && rc == 0; j++)
        for (int op = 0; op < 3; op++) {
            struct kern_conv2d_lowp d = { .conv = shape[j], .dtype = dtype, .layout = layout };
            struct kern_plan_cand h[KERN_PLAN_MAX_CANDS], f[KERN_PLAN_MAX_CANDS];
            int nh = 0, nf = 0;
            if ((rc = kern_cuda_conv2d_probe(ctx, &d, op, h, &nh, f, &nf)) < 0) {
                fprintf(stderr, "conv_probe: %s: %s\n", kern_strerror(rc),
                        kern_cuda_ctx_last_error(ctx));
                break;
            }
            const int pick[4] = { kern_plan_pick(h, nh, 0, KERN_PLAN_WS_CAP),
                                  kern_plan_pick(f, nf, 0, KERN_PLAN_WS_CAP),
                                  kern_plan_pick(f, nf, 1, KERN_PLAN_WS_CAP),
                                  kern_plan_pick(h, nh, 1, KERN_PLAN_WS_CAP) };
            const struct kern_plan_cand *from[4] = { h, f, f, h };
            double ms[4];
            for (int r = 0; r < 4; r++) {
                ms[r] = pick[r] < 0 ? -1 : find_ms(f, nf, from[r][pick[r]].algo);
                if (ms[r] < 0)
                    unknown++;
                else
                    tot[op][r] += ms[r] * uses[j];
            }
            const struct kern_conv2d *s = &shape[j];
            printf(
                "{\"shape\": \"n%d c%d %dx%d -> %d k%d s%d p%d\", \"uses\": %d, \"op\": \"%s\", ",
                s->n, s->c_in, s->h_in, s->w_in, s->c_out, s->k_h, s->stride_h, s->pad_h, uses[j],
                kern_plan_op_name(op));
            static const char *const rule[4] = { "heur_det", "find_det", "find_any", "heur_any" };
            for (int r = 0; r < 4; r++)
                printf("\"%s\": [%d, %.4f], ", rule[r], pick[r] < 0 ? -1 : from[r][pick[r]].algo,
                       ms[r]);
            print_list("heur", h, nh);
            printf(", ");
            print_list("find", f, nf);
            printf("}\n");
            fflush(stdout);
        }
    if (rc == 0) {
        printf("{\"summary\": {\"model\": \"%s\", \"img\": %d, \"batch\": %d, \"dtype\": \"%s\", "
               "\"layout\": \"%s\", \"shapes\": %d, \"convs\": %d, \"unknown\": %d",
               argv[1], img, batch, dts, lys, ns, nc, unknown);
        static const char *const rule[4] = { "heur_det", "find_det", "find_any", "heur_any" };
        double all[4] = { 0 };
        for (int op = 0; op < 3; op++)
            for (int r = 0; r < 4; r++) {
                printf(", \"ms_%s_%s\": %.3f", kern_plan_op_name(op), rule[r], tot[op][r]);
                all[r] += tot[op][r];
            }
        for (int r = 0; r < 4; r++)
            printf(", \"ms_step_%s\": %.3f", rule[r], all[r]);
        printf("}}\n");
    }
    free(shape);
    free(uses);
    kern_ctx_destroy(ctx);
    trn_act_plan_free(&P);
    trn_model_destroy(m);
    return rc < 0 ? 1 : 0;
}
