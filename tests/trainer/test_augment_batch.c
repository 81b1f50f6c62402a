/*
 * trn_aug_train_batch on a CPU kern context against the CPU pipeline the loader runs today:
 * trn_aug_train_sample per image, then the loader's HWC -> NCHW store (uint8, or float with the
 * table value = (float)i / 255.0f). Same tiles, same draws (a seeded generator through
 * trn_aug_draws_fill over several hyps: mosaic, mixup, letterbox, rotation, shear, perspective,
 * HSV on and off, flips): every byte of the batch tensor and every label row must be equal.
 * The plan reads pixels only through the pointers it is given (pixels[], the "device" copies):
 * the tiles' own pixel buffers are poisoned, so a plan that used them would differ.
 * Also: a resizing letterbox has no GPU plan (-ENOTSUP), argument errors, threads > 1.
 * --seed N replays a run (the seed is printed; fresh each run otherwise).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "augment.h"
#include "kern.h"
#include "tap.h"

static uint64_t g_rng;

static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uni(void *ctx)
{
    (void)ctx;
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

#define S         192 /* output side: 6 HSV SIMD blocks per row, small enough to be quick */
#define MAX_BATCH 6
#define CAP_ROWS  64

/* A realistic tile: a smooth gradient with noisy 8x8 blocks (flat runs and edges, as photos). */
struct tile_buf {
    uint8_t *real;   /* the pixels (the "device" copy the plan must use) */
    uint8_t *poison; /* what tiles[k].pixels points at: all 0xEE */
    float labels[5 * 8];
    struct trn_aug_tile t;
};

static void make_tile(struct tile_buf *b, int w, int h)
{
    const size_t n = (size_t)w * (size_t)h * 3;
    b->real = malloc(n);
    b->poison = malloc(n);
    memset(b->poison, 0xEE, n);
    const unsigned seed = (unsigned)rnd();
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const bool noisy = ((x / 8 + y / 8 + seed) % 3) == 0;
                const unsigned v = noisy ? (unsigned)(rnd() & 255)
                                         : (unsigned)(x * 255 / w + y * 128 / h + c * 60 + seed);
                b->real[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
            }
    const int nl = (int)(rnd() % 8);
    for (int j = 0; j < nl; j++) {
        float *l = b->labels + 5 * j;
        l[0] = (float)(rnd() % 80);
        l[1] = 0.15f + 0.7f * (float)uni(NULL);
        l[2] = 0.15f + 0.7f * (float)uni(NULL);
        l[3] = 0.05f + 0.25f * (float)uni(NULL);
        l[4] = 0.05f + 0.25f * (float)uni(NULL);
    }
    b->t = (struct trn_aug_tile){
        .pixels = b->poison, .w = w, .h = h, .labels = b->labels, .n_labels = nl
    };
}

/* The loader's store_image (trainer/data/loader.c), kept here as the reference layout. */
static void store_nchw(const uint8_t *hwc, int dtype, void *dst)
{
    const size_t plane = (size_t)S * S;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            if (dtype == KERN_AUG_F32)
                ((float *)dst)[c * plane + i] = (float)hwc[3 * i + c] / 255.0f;
            else
                ((uint8_t *)dst)[c * plane + i] = hwc[3 * i + c];
        }
}

struct sample {
    struct trn_aug_draws d;
    struct tile_buf tb[8];
    struct trn_aug_tile tiles[8];
    const uint8_t *pix[8];
    int n_tiles;
};

static void make_sample(struct sample *sm, const struct trn_aug_hyp *hyp)
{
    trn_aug_draws_fill(hyp, S, uni, NULL, &sm->d);
    sm->n_tiles = !sm->d.mosaic ? 1 : sm->d.mixup ? 8 : 4;
    for (int k = 0; k < sm->n_tiles; k++) {
        /* records are packed at long side S (the loader requires it); short side random */
        const int shortside = S / 3 + (int)(rnd() % (2 * S / 3 + 1));
        if (rnd() & 1)
            make_tile(&sm->tb[k], S, shortside);
        else
            make_tile(&sm->tb[k], shortside, S);
        sm->tiles[k] = sm->tb[k].t;
        sm->pix[k] = sm->tb[k].real;
    }
}

static void free_sample(struct sample *sm)
{
    for (int k = 0; k < sm->n_tiles; k++) {
        free(sm->tb[k].real);
        free(sm->tb[k].poison);
    }
}

/* One batch of n samples under hyp, on ctx: batch op vs per-sample CPU pipeline. */
static void check_batch(struct kern_ctx *ctx, struct trn_aug_ws *ws, const struct trn_aug_hyp *hyp,
                        int n, int dtype, const char *what)
{
    struct sample *sm = calloc((size_t)n, sizeof *sm);
    struct trn_aug_batch_item items[MAX_BATCH];
    struct kern_aug_sample plans[MAX_BATCH];
    static float rows_b[MAX_BATCH][CAP_ROWS * 5], rows_c[CAP_ROWS * 5];
    const size_t esz = dtype == KERN_AUG_F32 ? 4 : 1, img = (size_t)3 * S * S * esz;
    uint8_t *got = malloc(img * (size_t)n), *want = malloc(img * (size_t)n);
    uint8_t *hwc = malloc((size_t)S * S * 3);
    memset(got, 0xA5, img * (size_t)n); /* poisoned: every byte must be written */
    for (int i = 0; i < n; i++) {
        make_sample(&sm[i], hyp);
        items[i] = (struct trn_aug_batch_item){ .d = &sm[i].d,
                                                .tiles = sm[i].tiles,
                                                .n_tiles = sm[i].n_tiles,
                                                .pixels = sm[i].pix,
                                                .rows = rows_b[i],
                                                .cap_rows = CAP_ROWS };
    }
    const int rc = trn_aug_train_batch(ctx, kern_ops_ref(), ws, hyp, items, n, plans, dtype, got);
    is_int(rc, 0, "%s: trn_aug_train_batch returns 0", what);
    int rows_equal = 1, n_rows = 0, mosaics = 0, mixups = 0;
    for (int i = 0; i < n; i++) {
        /* the CPU pipeline on the real pixels */
        for (int k = 0; k < sm[i].n_tiles; k++)
            sm[i].tiles[k].pixels = sm[i].tb[k].real;
        const int nr = trn_aug_train_sample(ws, hyp, &sm[i].d, sm[i].tiles, sm[i].n_tiles, hwc,
                                            rows_c, CAP_ROWS);
        store_nchw(hwc, dtype, want + (size_t)i * img);
        rows_equal &= nr >= 0 && nr == items[i].n_rows &&
                      !memcmp(rows_c, rows_b[i], sizeof(float) * 5 * (size_t)(nr > 0 ? nr : 0));
        n_rows += nr;
        mosaics += sm[i].d.mosaic;
        mixups += sm[i].d.mixup;
    }
    ok(rows_equal, "%s: label rows equal bit for bit (%d rows, %d mosaics, %d mixups of %d)", what,
       n_rows, mosaics, mixups, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < img * (size_t)n; i++)
        if (got[i] != want[i] && !bad++) first = i;
    ok(bad == 0, "%s: batch tensor equals the CPU pipeline's (%zu bytes differ)", what, bad);
    if (bad) tap_diag("first difference at byte %zu (image %zu)", first, first / img);
    for (int i = 0; i < n; i++)
        free_sample(&sm[i]);
    free(sm);
    free(got);
    free(want);
    free(hwc);
}

int main(int argc, char **argv)
{
    uint64_t seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 0);
    printf("# seed %llu (replay with --seed)\n", (unsigned long long)seed);
    g_rng = seed;

    struct kern_ctx *ctx = NULL, *ctx4 = NULL;
    struct kern_ctx_opts o;
    kern_ctx_opts_default(&o);
    o.threads = 3;
    struct trn_aug_ws *ws = NULL;
    if (kern_ctx_create(NULL, &ctx) < 0 || kern_ctx_create(&o, &ctx4) < 0 ||
        trn_aug_ws_create(S, CAP_ROWS, 0, &ws) < 0) {
        printf("Bail out! setup\n");
        return 99;
    }

    struct trn_aug_hyp hyp;
    trn_aug_hyp_default(&hyp);
    hyp.mixup = 0.5;
    check_batch(ctx, ws, &hyp, MAX_BATCH, KERN_AUG_U8, "default hyp + mixup 0.5, u8");
    check_batch(ctx, ws, &hyp, MAX_BATCH, KERN_AUG_F32, "default hyp + mixup 0.5, f32");
    hyp.degrees = 15, hyp.shear = 4, hyp.flipud = 0.5, hyp.mosaic = 0.5, hyp.scale = 0.9;
    check_batch(ctx, ws, &hyp, MAX_BATCH, KERN_AUG_F32, "rotation, shear, flipud, letterbox");
    hyp.perspective = 0.0008;
    check_batch(ctx4, ws, &hyp, MAX_BATCH, KERN_AUG_U8, "perspective, 3 threads, u8");
    struct trn_aug_hyp plain;
    trn_aug_hyp_default(&plain);
    plain.hsv_h = plain.hsv_s = plain.hsv_v = 0, plain.fliplr = 0, plain.mosaic = 0;
    plain.translate = 0, plain.scale = 0;
    check_batch(ctx, ws, &plain, 2, KERN_AUG_U8, "letterbox, identity warp, no HSV");

    /* a letterbox that would resize has no GPU plan; the CPU pipeline still handles it */
    {
        struct sample sm;
        memset(&sm, 0, sizeof sm);
        trn_aug_draws_fill(&plain, S, uni, NULL, &sm.d);
        make_tile(&sm.tb[0], 100, 80);
        sm.n_tiles = 1;
        sm.pix[0] = sm.tb[0].real;
        float rows[CAP_ROWS * 5];
        struct kern_aug_sample plan;
        is_int(
            trn_aug_plan_sample(ws, &plain, &sm.d, &sm.tb[0].t, 1, sm.pix, &plan, rows, CAP_ROWS),
            -ENOTSUP, "a resizing letterbox has no pixel plan (-ENOTSUP)");
        uint8_t *hwc = malloc((size_t)S * S * 3);
        sm.tb[0].t.pixels = sm.tb[0].real;
        ok(trn_aug_train_sample(ws, &plain, &sm.d, &sm.tb[0].t, 1, hwc, rows, CAP_ROWS) >= 0,
           "the CPU pipeline letterboxes it");
        free(hwc);
        free_sample(&sm);
    }
    /* argument errors */
    {
        struct trn_aug_batch_item it = { 0 };
        struct kern_aug_sample plan;
        uint8_t out[4];
        is_int(trn_aug_train_batch(NULL, kern_ops_ref(), ws, &hyp, &it, 1, &plan, 0, out), -EINVAL,
               "NULL context: -EINVAL");
        is_int(trn_aug_train_batch(ctx, kern_ops_ref(), ws, &hyp, &it, 0, &plan, 0, out), -EINVAL,
               "empty batch: -EINVAL");
        is_int(trn_aug_train_batch(ctx, kern_ops_ref(), ws, &hyp, &it, 1, &plan, 0, out), -EINVAL,
               "item without draws: -EINVAL");
    }
    trn_aug_ws_destroy(ws);
    kern_ctx_destroy(ctx);
    kern_ctx_destroy(ctx4);
    return tap_done();
}
