/*
 * Initial weights: the documented generator bit for bit (expected words come from an independent
 * pure-Python implementation of trainer/model/model.h's description, with Philox checked against
 * Random123's known answers), the fp16 rounding, the distributions and constants of recipe S2
 * (kaiming-uniform bounds, BN 1/0, Detect bias priors, anchors in grid units), determinism.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_testutil.h"
#include "tap.h"

static uint32_t bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float from_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static const float *tensor(struct trn_model *m, const char *name, const struct trn_tensor **t)
{
    const int k = trn_model_find(m, name);
    *t = trn_model_tensor(m, k);
    if (!*t) {
        printf("Bail out! no tensor %s\n", name);
        exit(99);
    }
    return (const float *)trn_model_arena(m, (*t)->arena) + (*t)->offset;
}

static void test_fp16(void)
{
    ok(trn_model_round_fp16(1.0f) == 1.0f, "fp16(1) = 1");
    is_int(bits(trn_model_round_fp16(1.0f / 3.0f)), bits(0.333251953125f),
           "fp16(1/3) = 0.333251953125");
    ok(trn_model_round_fp16(1.0f + 0x1p-11f) == 1.0f, "tie 1 + 2^-11 rounds to even (1)");
    ok(trn_model_round_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f,
       "tie 1 + 3*2^-11 rounds to even (1 + 2^-9)");
    ok(trn_model_round_fp16(65519.0f) == 65504.0f, "65519 -> 65504 (max half)");
    ok(isinf(trn_model_round_fp16(65520.0f)), "65520 -> inf");
    ok(trn_model_round_fp16(-1e9f) == -INFINITY, "-1e9 -> -inf");
    ok(trn_model_round_fp16(0x1p-25f) == 0.0f, "2^-25 (half the smallest subnormal) -> 0 (even)");
    ok(trn_model_round_fp16(3e-8f) == 0x1p-24f, "3e-8 -> 2^-24");
    ok(trn_model_round_fp16(0x1p-14f - 0x1p-26f) == 0x1p-14f, "just below 2^-14 -> 2^-14");
    ok(trn_model_round_fp16(-0.0f) == 0.0f && signbit(trn_model_round_fp16(-0.0f)), "-0 stays -0");
    ok(isnan(trn_model_round_fp16(NAN)), "NaN stays NaN");
}

static void test_generator(void)
{
    /* u(seed 0, k 0, j 0..3): the words of the first Philox block, >> 8, * 2^-24 */
    const uint32_t want_u[4] = { 0x3f70adec, 0x3d449700, 0x3d81ff08, 0x3f485361 };
    int bad = 0;
    for (int j = 0; j < 4; j++)
        bad += bits(trn_model_init_uniform(0, 0, (uint64_t)j)) != want_u[j];
    is_int(bad, 0, "u(0, 0, 0..3) matches the Python reference");
    ok(trn_model_init_uniform(0, 0, 4) != trn_model_init_uniform(0, 0, 0) &&
           trn_model_init_uniform(0, 1, 0) != trn_model_init_uniform(0, 0, 0) &&
           trn_model_init_uniform(1, 0, 0) != trn_model_init_uniform(0, 0, 0),
       "element, tensor and seed each change the draw");

    struct trn_model *m = tu_model_load("yolov5n", 0);
    const struct trn_tensor *t;
    static const struct {
        uint64_t seed;
        uint32_t w[7];
    } want[2] = {
        { 0,
          { 0x3dad8000, 0xbdb22000, 0xbdac0000, 0x3d5ec000, 0xbd6ec000, 0xbbd3c000, 0x3db6c000 } },
        { 12345,
          { 0xbdb2c000, 0x3dac8000, 0xbda20000, 0xbd25c000, 0x3d8f2000, 0x3db88000, 0x3d33e000 } },
    };
    static const int js[7] = { 0, 1, 2, 3, 4, 107, 1727 };
    for (int s = 0; s < 2; s++) {
        trn_model_init(m, want[s].seed);
        const float *w = tensor(m, "model.0.conv.weight", &t);
        bad = 0;
        for (int i = 0; i < 7; i++)
            if (bits(w[js[i]]) != want[s].w[i]) {
                bad++;
                tap_diag("seed %llu j %d: got 0x%08x want 0x%08x", (unsigned long long)want[s].seed,
                         js[i], bits(w[js[i]]), want[s].w[i]);
            }
        is_int(bad, 0, "yolov5n model.0.conv.weight, seed %llu: bit-exact with the reference",
               (unsigned long long)want[s].seed);
    }
    trn_model_init(m, 0);
    const float *b = tensor(m, "model.24.m.0.bias", &t);
    static const struct {
        int j;
        uint32_t w;
    } wb[6] = { { 0, 0x3c932000 },  { 4, 0xc0d4e000 },  { 5, 0xc0988000 },
                { 84, 0xc0986000 }, { 89, 0xc0d28000 }, { 254, 0xc09e8000 } };
    bad = 0;
    for (int i = 0; i < 6; i++)
        if (bits(b[wb[i].j]) != wb[i].w) {
            bad++;
            tap_diag("bias j %d: got 0x%08x (%g) want 0x%08x (%g)", wb[i].j, bits(b[wb[i].j]),
                     (double)b[wb[i].j], wb[i].w, (double)from_bits(wb[i].w));
        }
    is_int(bad, 0, "yolov5n model.24.m.0.bias (obj and class priors), seed 0: bit-exact");
    trn_model_destroy(m);
}

static void test_distribution(void)
{
    struct trn_model *m = tu_model_load("yolov5s", 0);
    const struct trn_model_info *I = trn_model_info(m);
    trn_model_init(m, 7);
    int out_of_bound = 0, not_half = 0, bn_wrong = 0, rounding_hist[2] = { 0, 0 };
    double worst_mean = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *t = trn_model_tensor(m, k);
        if (t->arena == TRN_ARENA_COUNT) {
            bn_wrong += ((const int64_t *)trn_model_arena(m, TRN_ARENA_COUNT))[t->offset] != 0;
            continue;
        }
        const float *x = (const float *)trn_model_arena(m, t->arena) + t->offset;
        for (size_t j = 0; j < t->numel; j++)
            not_half += trn_model_round_fp16(x[j]) != x[j];
        if (t->role == TRN_T_CONV_WEIGHT || t->role == TRN_T_DETECT_WEIGHT) {
            const double bound = 1.0 / sqrt((double)t->shape[1] * t->shape[2] * t->shape[3]);
            double s = 0;
            for (size_t j = 0; j < t->numel; j++) {
                out_of_bound += fabs(x[j]) > bound * (1 + 0x1p-10);
                s += x[j];
                rounding_hist[x[j] > 0]++;
            }
            /* U(-b, b) has mean 0 and sd b/sqrt(3): the mean of n draws is within 6 sd/sqrt(n) */
            const double z = fabs(s / (double)t->numel) / (bound / sqrt(3.0 * (double)t->numel));
            worst_mean = z > worst_mean ? z : worst_mean;
        }
        const float want = t->role == TRN_T_BN_WEIGHT || t->role == TRN_T_BN_VAR ? 1.0f : 0.0f;
        if (t->role == TRN_T_BN_WEIGHT || t->role == TRN_T_BN_VAR || t->role == TRN_T_BN_BIAS ||
            t->role == TRN_T_BN_MEAN)
            for (size_t j = 0; j < t->numel; j++)
                bn_wrong += x[j] != want;
    }
    is_int(out_of_bound, 0, "conv weights within +-1/sqrt(fan_in)");
    ok(worst_mean < 6, "conv weight means look like U(-b, b) (worst z %.2f)", worst_mean);
    ok(rounding_hist[0] > 3000000 && rounding_hist[1] > 3000000,
       "both signs drawn (%d negative, %d positive)", rounding_hist[0], rounding_hist[1]);
    is_int(not_half, 0, "every float is fp16-representable");
    is_int(bn_wrong, 0, "BN gamma 1, beta 0, mean 0, var 1, count 0");

    /* Detect priors: per level, obj = U + ln(8 / (640 / s)^2), classes = U + ln(0.6 / 79.00001) */
    const double obj[3] = { log(8.0 / 6400), log(8.0 / 1600), log(8.0 / 400) };
    const double cls = log(0.6 / (80 - 0.99999));
    int bias_wrong = 0;
    for (int l = 0; l < 3; l++) {
        char name[32];
        snprintf(name, sizeof name, "model.24.m.%d.bias", l);
        const struct trn_tensor *t;
        const float *x = tensor(m, name, &t);
        const struct trn_tensor *w = trn_model_tensor(m, trn_model_find(m, name) - 1);
        const double bound = 1.0 / sqrt((double)w->shape[1]) + 0.01;
        for (int a = 0; a < 3; a++)
            for (int j = 0; j < 85; j++) {
                const double base = j == 4 ? obj[l] : j >= 5 ? cls : 0;
                bias_wrong += fabs(x[a * 85 + j] - base) > bound;
            }
    }
    is_int(bias_wrong, 0, "Detect biases: xywh ~U, obj around -6.685/-5.298/-3.912, cls -4.880");

    const struct trn_tensor *t;
    const float *an = tensor(m, "model.24.anchors", &t);
    const float grid[18] = { 1.25f,  1.625f,  2.0f,   3.75f,   4.125f,    2.875f,
                             1.875f, 3.8125f, 3.875f, 2.8125f, 3.6875f,   7.4375f,
                             3.625f, 2.8125f, 4.875f, 6.1875f, 11.65625f, 10.1875f };
    is_int(memcmp(an, grid, sizeof grid), 0, "anchors in grid units (recipe S2)");

    /* padding between tensors is zero */
    const float *P = trn_model_arena(m, TRN_ARENA_PARAM);
    size_t pad_nonzero = 0, prev_end = 0;
    for (int k = 0; k < I->n_tensors; k++) {
        const struct trn_tensor *u = trn_model_tensor(m, k);
        if (u->arena != TRN_ARENA_PARAM) continue;
        for (size_t j = prev_end; j < u->offset; j++)
            pad_nonzero += P[j] != 0;
        prev_end = u->offset + u->numel;
    }
    is_int(pad_nonzero, 0, "alignment padding stays zero");

    /* Same seed, same bytes; another seed, other weights but the same constants. */
    const size_t n = I->arena_len[TRN_ARENA_PARAM];
    float *copy = malloc(n * sizeof *copy);
    memcpy(copy, P, n * sizeof *copy);
    trn_model_init(m, 7);
    is_int(memcmp(copy, P, n * sizeof *copy), 0, "seed 7 twice: identical parameters");
    trn_model_init(m, 8);
    size_t same = 0;
    for (size_t j = 0; j < n; j++)
        same += copy[j] == P[j];
    ok(same < n / 50 + 50000, "seed 8 differs (%zu of %zu floats equal: BN constants, padding)",
       same, n);
    free(copy);
    trn_model_destroy(m);
}

int main(void)
{
    test_fp16();
    test_generator();
    test_distribution();
    return tap_done();
}
