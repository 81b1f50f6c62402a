/*
 * Labels follow pixels: tiles with one uniquely coloured filled rectangle per label (the class
 * is the colour's index) on a grey background go through whole training samples at many random
 * settings (mosaic or letterbox, rotation, scale, shear, translation, perspective, boxes or
 * polygons, HSV, flips), and the output must agree with its pixels:
 *   - every pixel of a label's exact colour lies inside that label's box (within 2 px);
 *   - every colour visible in the output has a box, unless box_candidates had to drop it (its
 *     visible extent is then at most a few pixels, or its visible area is under the area
 *     threshold of the original box scaled by the warp's scale);
 *   - every box of a few pixels or more, of a rectangle at least 3 px thick after the warp,
 *     holds pixels of its colour (isolated ones count here), unless the warp rotates or shears
 *     and the box touches the image border (ultralytics' corner boxes of rotated rectangles
 *     may overhang the image where the rectangle does not reach it), or the rectangle was
 *     cropped off the mosaic canvas (ultralytics clips its polygon points to the canvas edge,
 *     where a rotation gives the clipped line a box: counted and reported, as the recipe does
 *     it).
 * Only exact colours count: interior pixels keep their colour through bilinear warps (the
 * weights sum to one exactly) and HSV maps a colour to one colour (the output width is a
 * multiple of 32, OpenCV's SIMD block), while edge pixels are blends and are ignored.
 * copy_paste's mirrored copies are checked in test_copy_paste (below).
 * Mixup is checked by composition: the sample equals the pixel blend of its two mosaics and its
 * labels are their concatenation.
 */
#include "augment.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S          96 /* output side: a multiple of 32 (see above) */
#define N_COLOURS  100
#define BACKGROUND 100 /* tile grey, distinct from the 114 fill */
#define ITERS      300

#define RNG_TESTUTIL_SEED 0x9E3779B97F4A7C15ull
#include "rng_testutil.h"

static int irand(int lo, int hi)
{
    return lo + (int)(urand(NULL) * (hi - lo + 1));
}

/*
 * Palette: irregular saturated colours, pairwise far apart and far from grey, so that a blend
 * of edge pixels lands exactly on another palette colour only by rare accident (a lattice of
 * colours would make blends like (a + b) / 2 hit palette entries all the time).
 */
static uint8_t g_pal[N_COLOURS][3];

static void make_palette(void)
{
    int n = 0;
    while (n < N_COLOURS) {
        uint8_t c[3];
        for (int k = 0; k < 3; k++)
            c[k] = (uint8_t)irand(7, 249);
        const int mx = c[0] > c[1] ? (c[0] > c[2] ? c[0] : c[2]) : (c[1] > c[2] ? c[1] : c[2]);
        const int mn = c[0] < c[1] ? (c[0] < c[2] ? c[0] : c[2]) : (c[1] < c[2] ? c[1] : c[2]);
        if (mx - mn < 60) continue; /* too grey */
        bool near = false;
        for (int j = 0; j < n && !near; j++)
            near = abs(c[0] - g_pal[j][0]) + abs(c[1] - g_pal[j][1]) + abs(c[2] - g_pal[j][2]) < 24;
        if (near) continue;
        memcpy(g_pal[n++], c, 3);
    }
}

struct tile_buf {
    struct trn_aug_tile t;
    uint8_t px[S * S * 3];
    float labels[5 * 8];
    uint32_t seg_n[8];
    float seg_xy[2 * 4 * 8];
};

/* A w x h tile with up to 6 non-overlapping rectangles, colours taken from *next_colour. */
static void make_tile(struct tile_buf *b, int w, int h, bool segs, int *next_colour)
{
    memset(b->px, BACKGROUND, (size_t)w * h * 3);
    b->t.pixels = b->px, b->t.w = w, b->t.h = h;
    b->t.labels = b->labels;
    b->t.seg_n = segs ? b->seg_n : NULL;
    b->t.seg_xy = segs ? b->seg_xy : NULL;
    int n = 0, rect[6][4];
    const int want = irand(0, 6);
    for (int tries = 0; tries < 50 && n < want; tries++) {
        const int rw = irand(6, w / 2), rh = irand(6, h / 2);
        const int x1 = irand(0, w - rw), y1 = irand(0, h - rh);
        bool clash = false;
        for (int j = 0; j < n && !clash; j++)
            clash = x1 < rect[j][2] + 2 && rect[j][0] < x1 + rw + 2 && y1 < rect[j][3] + 2 &&
                    rect[j][1] < y1 + rh + 2;
        if (clash) continue;
        rect[n][0] = x1, rect[n][1] = y1, rect[n][2] = x1 + rw, rect[n][3] = y1 + rh;
        const int c = (*next_colour)++ % N_COLOURS;
        for (int y = y1; y < y1 + rh; y++)
            for (int x = x1; x < x1 + rw; x++)
                memcpy(b->px + ((size_t)y * w + x) * 3, g_pal[c], 3);
        float *l = b->labels + 5 * n;
        l[0] = (float)c;
        l[1] = (float)((x1 + rw / 2.0) / w), l[2] = (float)((y1 + rh / 2.0) / h);
        l[3] = (float)rw / (float)w, l[4] = (float)rh / (float)h;
        const float q[8] = { (float)x1 / w, (float)y1 / h,        (float)(x1 + rw) / w,
                             (float)y1 / h, (float)(x1 + rw) / w, (float)(y1 + rh) / h,
                             (float)x1 / w, (float)(y1 + rh) / h };
        b->seg_n[n] = 4;
        memcpy(b->seg_xy + 8 * n, q, sizeof q);
        n++;
    }
    b->t.n_labels = n;
}

struct stats {
    long outside, missing, invented, checked_px, boxes, dropped_ok, samples, clamp_artefacts;
};

/* Colour id of each mapped palette entry, or -1 when HSV made two colours collide. */
static int map_palette(const struct trn_aug_hsv_draws *hsv, uint8_t mapped[N_COLOURS][3])
{
    /* one 32-pixel row per colour: all in OpenCV's SIMD block, as every pixel of the sample */
    uint8_t row[32 * 3];
    for (int c = 0; c < N_COLOURS; c++) {
        for (int i = 0; i < 32; i++)
            memcpy(row + 3 * i, g_pal[c], 3);
        trn_aug_hsv(row, 32, 1, hsv);
        memcpy(mapped[c], row, 3);
    }
    for (int a = 0; a < N_COLOURS; a++)
        for (int b = a + 1; b < N_COLOURS; b++)
            if (!memcmp(mapped[a], mapped[b], 3)) return -1;
    return 0;
}

static void check_sample(const uint8_t *img, const float *rows, int n,
                         const struct trn_aug_draws *d, const uint8_t mapped[N_COLOURS][3],
                         const float *orig_area, const float *orig_side, const bool *on_canvas,
                         bool segs, struct stats *st)
{
    /* per colour: exact-pixel extent and count */
    int minx[N_COLOURS], miny[N_COLOURS], maxx[N_COLOURS], maxy[N_COLOURS], cnt[N_COLOURS];
    int box_of[N_COLOURS], cnt_any[N_COLOURS];
    for (int c = 0; c < N_COLOURS; c++)
        minx[c] = miny[c] = 1 << 30, maxx[c] = maxy[c] = -1, cnt[c] = cnt_any[c] = 0,
        box_of[c] = -1;
    for (int i = 0; i < n; i++) {
        const int c = (int)rows[5 * i];
        if (c >= 0 && c < N_COLOURS) box_of[c] = i;
    }
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            const uint8_t *p = img + ((size_t)y * S + x) * 3;
            /* an interior pixel has a neighbour of the same colour; isolated matches are
             * blends that happen to equal a palette colour */
            const bool twin =
                (x > 0 && !memcmp(p, p - 3, 3)) || (x + 1 < S && !memcmp(p, p + 3, 3)) ||
                (y > 0 && !memcmp(p, p - 3 * S, 3)) || (y + 1 < S && !memcmp(p, p + 3 * S, 3));
            for (int c = 0; c < N_COLOURS; c++) {
                if (memcmp(p, mapped[c], 3)) continue;
                cnt_any[c]++;
                if (!twin) break;
                cnt[c]++;
                minx[c] = x < minx[c] ? x : minx[c], maxx[c] = x > maxx[c] ? x : maxx[c];
                miny[c] = y < miny[c] ? y : miny[c], maxy[c] = y > maxy[c] ? y : maxy[c];
                break;
            }
        }
    const struct trn_aug_persp_draws *pd = &d->mos.persp;
    const bool rotates = pd->angle != 0 || pd->shear_x != 0 || pd->shear_y != 0 || pd->perspective;
    for (int c = 0; c < N_COLOURS; c++) {
        const int i = box_of[c];
        if (cnt[c] == 0 && i < 0) continue;
        if (i >= 0) {
            st->boxes++;
            const float *r = rows + 5 * i;
            const double x1 = (r[1] - r[3] / 2) * S, x2 = (r[1] + r[3] / 2) * S;
            const double y1 = (r[2] - r[4] / 2) * S, y2 = (r[2] + r[4] / 2) * S;
            if (cnt[c]) {
                st->checked_px += cnt[c];
                const double tol = 2.0;
                if (minx[c] < x1 - tol || maxx[c] > x2 + tol || miny[c] < y1 - tol ||
                    maxy[c] > y2 + tol) {
                    if (st->outside++ < 5)
                        tap_diag("colour %d pixels [%d,%d]-[%d,%d] outside box [%.1f,%.1f]-"
                                 "[%.1f,%.1f] (angle %.1f scale %.2f flips %d%d mosaic %d)",
                                 c, minx[c], miny[c], maxx[c], maxy[c], x1, y1, x2, y2, pd->angle,
                                 pd->scale, d->flipud, d->fliplr, d->mosaic);
                }
            } else if (x2 - x1 >= 4 && y2 - y1 >= 4 && orig_side[c] * pd->scale >= 3 &&
                       cnt_any[c] == 0 && !on_canvas[c]) {
                st->clamp_artefacts++;
            } else if (x2 - x1 >= 4 && y2 - y1 >= 4 && orig_side[c] * pd->scale >= 3 &&
                       cnt_any[c] == 0) {
                const bool at_border = x1 <= 0.5 || y1 <= 0.5 || x2 >= S - 0.5 || y2 >= S - 0.5;
                if (!(rotates && at_border) && st->invented++ < 5)
                    tap_diag("box of colour %d [%.1f,%.1f]-[%.1f,%.1f] holds none of its pixels "
                             "(angle %.1f shear %.1f,%.1f)",
                             c, x1, y1, x2, y2, pd->angle, pd->shear_x, pd->shear_y);
            }
        } else {
            /* visible but dropped: box_candidates must have had a reason. The visible extent
             * is inside the warped box, so a dropped box shows at most about 3 px, or a visible
             * area under the threshold. */
            const double vw = maxx[c] - minx[c] + 1, vh = maxy[c] - miny[c] + 1;
            const double thr = segs ? 0.01 : 0.10;
            const double ratio = (vw - 1) * (vh - 1) / (orig_area[c] * pd->scale * pd->scale);
            if (vw <= 4 || vh <= 4 || ratio <= thr || vw / vh > 50 || vh / vw > 50) {
                st->dropped_ok++;
            } else if (st->missing++ < 5) {
                tap_diag("colour %d visible at [%d,%d]-[%d,%d] (%d px, area ratio %.3f) has no "
                         "box (angle %.1f scale %.2f)",
                         c, minx[c], miny[c], maxx[c], maxy[c], cnt[c], ratio, pd->angle,
                         pd->scale);
            }
        }
    }
    st->samples++;
}

static void random_hyp(struct trn_aug_hyp *hyp)
{
    trn_aug_hyp_default(hyp);
    hyp->degrees = urand(NULL) < 0.5 ? 0 : 30 * urand(NULL);
    hyp->translate = 0.3 * urand(NULL);
    hyp->scale = 0.8 * urand(NULL);
    hyp->shear = urand(NULL) < 0.6 ? 0 : 8 * urand(NULL);
    hyp->perspective = urand(NULL) < 0.7 ? 0 : 0.0008 * urand(NULL);
    const bool hsv = urand(NULL) < 0.6;
    hyp->hsv_h = hsv ? 0.015 : 0, hyp->hsv_s = hsv ? 0.7 : 0, hyp->hsv_v = hsv ? 0.4 : 0;
    hyp->flipud = 0.5;
    hyp->fliplr = 0.5;
    hyp->mosaic = 0.85;
    hyp->mixup = 0;
}

static void test_random_settings(bool segs)
{
    struct stats st = { 0 };
    struct trn_aug_ws *ws = NULL;
    if (trn_aug_ws_create(S, 64, 256, &ws) < 0) {
        ok(0, "workspace");
        return;
    }
    static struct tile_buf tb[4];
    static uint8_t out[S * S * 3];
    float rows[5 * 64];
    long hsv_collisions = 0, errors = 0;
    for (int it = 0; it < ITERS; it++) {
        struct trn_aug_hyp hyp;
        random_hyp(&hyp);
        struct trn_aug_draws d;
        trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
        uint8_t mapped[N_COLOURS][3];
        if (map_palette(&d.hsv, mapped) < 0) {
            hsv_collisions++;
            d.hsv.apply = false;
            map_palette(&d.hsv, mapped);
        }
        int colour = irand(0, N_COLOURS - 1);
        const int nt = d.mosaic ? 4 : 1;
        float orig_area[N_COLOURS] = { 0 }, orig_side[N_COLOURS] = { 0 };
        struct trn_aug_tile tiles[4];
        for (int t = 0; t < nt; t++) {
            /* load_image keeps the long side at s; the non-mosaic path also sees others */
            int w = S, h = irand(S / 3, S);
            if (urand(NULL) < 0.5) w = h, h = S;
            make_tile(&tb[t], w, h, segs, &colour);
            tiles[t] = tb[t].t;
        }
        /* the area box_candidates compares with: the label in the pixels it is warped from */
        for (int t = 0; t < nt; t++) {
            double k = 1;
            if (!d.mosaic) /* letterbox scale */
                k = fmin((double)S / tiles[t].w, (double)S / tiles[t].h);
            for (int j = 0; j < tiles[t].n_labels; j++) {
                const float *l = tiles[t].labels + 5 * j;
                orig_area[(int)l[0]] = (float)(l[3] * tiles[t].w * k * l[4] * tiles[t].h * k);
                orig_side[(int)l[0]] = (float)(fmin(l[3] * tiles[t].w, l[4] * tiles[t].h) * k);
            }
        }
        const int n = trn_aug_train_sample(ws, &hyp, &d, tiles, nt, out, rows, 64);
        if (n < 0) {
            if (errors++ < 3) tap_diag("train_sample: %s", trn_aug_strerror(n));
            continue;
        }
        /* colours that reach the mosaic canvas at all (a tile's rectangle can be cropped away) */
        bool on_canvas[N_COLOURS];
        for (int c = 0; c < N_COLOURS; c++)
            on_canvas[c] = !d.mosaic;
        if (d.mosaic) {
            static uint8_t canvas[4 * S * S * 3];
            float crows[5 * 64];
            uint32_t cseg_n[64];
            float cseg_xy[2 * 256];
            struct trn_aug_boxes cb = {
                .rows = crows, .seg_n = cseg_n, .seg_xy = cseg_xy, .cap_rows = 64, .cap_points = 256
            };
            trn_aug_mosaic4(S, d.mos.xc, d.mos.yc, tiles, canvas, &cb);
            for (size_t i = 0; i < sizeof canvas; i += 3)
                for (int c = 0; c < N_COLOURS; c++)
                    if (!memcmp(canvas + i, g_pal[c], 3)) on_canvas[c] = true;
        }
        check_sample(out, rows, n, &d, (const uint8_t(*)[3])mapped, orig_area, orig_side, on_canvas,
                     segs && d.mosaic, &st);
    }
    const char *kind = segs ? "polygons" : "boxes";
    is_int(errors, 0, "%s: %d random samples run", kind, ITERS);
    ok(st.checked_px > 10000 && st.boxes > 1000, "%s: %ld boxes and %ld exact pixels checked", kind,
       st.boxes, st.checked_px);
    is_int(st.outside, 0, "%s: every exact pixel inside its colour's box (2 px)", kind);
    is_int(st.missing, 0, "%s: no visible colour lost (%ld drops justified by box_candidates)",
           kind, st.dropped_ok);
    is_int(st.invented, 0, "%s: no box without its colour", kind);
    /* ultralytics clips polygon points to the canvas one by one, so a rectangle cropped off the
     * canvas becomes a segment along the canvas edge, which a rotation turns into a box. */
    tap_diag("%s: boxes of rectangles cropped off the canvas (ultralytics' clip artefact): %ld",
             kind, st.clamp_artefacts);
    tap_diag("%s: HSV palette collisions (HSV off for those samples): %ld", kind, hsv_collisions);
    trn_aug_ws_destroy(ws);
}

/* Mixup = pixel blend of the two mosaics and concatenated labels. */
static void test_mixup(void)
{
    struct trn_aug_ws *ws = NULL;
    trn_aug_ws_create(S, 64, 256, &ws);
    static struct tile_buf tb[8];
    static uint8_t a[S * S * 3], b[S * S * 3], m[S * S * 3];
    float ra[5 * 64], rb[5 * 64], rm[5 * 64];
    int bad_px = 0, bad_rows = 0, runs = 0, rows_total = 0;
    for (int it = 0; it < 40; it++) {
        struct trn_aug_hyp hyp;
        random_hyp(&hyp);
        hyp.mosaic = 1, hyp.mixup = 1;
        hyp.hsv_h = hyp.hsv_s = hyp.hsv_v = 0;
        hyp.flipud = hyp.fliplr = 0;
        struct trn_aug_draws d;
        trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
        int colour = 0;
        struct trn_aug_tile tiles[8];
        for (int t = 0; t < 8; t++) {
            make_tile(&tb[t], S, irand(S / 3, S), it % 2, &colour);
            tiles[t] = tb[t].t;
        }
        struct trn_aug_draws da = d, db = d;
        da.mixup = db.mixup = false;
        db.mos = d.mixmos;
        const int na = trn_aug_train_sample(ws, &hyp, &da, tiles, 4, a, ra, 64);
        const int nb = trn_aug_train_sample(ws, &hyp, &db, tiles + 4, 4, b, rb, 64);
        const int nm = trn_aug_train_sample(ws, &hyp, &d, tiles, 8, m, rm, 64);
        if (na < 0 || nb < 0 || nm != na + nb) {
            bad_rows++;
            continue;
        }
        trn_aug_mixup(a, b, sizeof a, d.mixup_ratio);
        bad_px += memcmp(a, m, sizeof a) != 0;
        bad_rows += memcmp(ra, rm, sizeof(float) * 5 * (size_t)na) != 0 ||
                    memcmp(rb, rm + 5 * na, sizeof(float) * 5 * (size_t)nb) != 0;
        ok(d.mixup_ratio > 0.2 && d.mixup_ratio < 0.8, "mixup ratio %.3f plausible for Beta(32,32)",
           d.mixup_ratio);
        runs++;
        rows_total += nm;
    }
    is_int(bad_px, 0, "mixup: pixels are the blend of the two mosaics (%d runs)", runs);
    is_int(bad_rows, 0, "mixup: labels are the two mosaics' labels concatenated (%d rows)",
           rows_total);
    trn_aug_ws_destroy(ws);
}

/*
 * copy_paste (hyp.copy_paste 1: every polygon label tried): a label's mirrored copy carries its
 * class, so a colour may now have several boxes. Without rotation or shear (boxes of rectangles
 * are then exact): every exact interior pixel of a colour lies in one of its boxes (2 px), and
 * every box of 6 px or more holds pixels of its colour unless other boxes cover all of it
 * (copy_paste lets a copy hide up to 30% of each label, so several may hide one) or it touches
 * the output's border (the warp may keep just the hidden part; counted).
 */
static void test_copy_paste(void)
{
    struct trn_aug_ws *ws = NULL;
    if (trn_aug_ws_create(S, 128, 512, &ws) < 0) {
        ok(0, "workspace");
        return;
    }
    static struct tile_buf tb[4];
    static uint8_t out[S * S * 3];
    float rows[5 * 128];
    long outside = 0, invented = 0, checked = 0, boxes = 0, copies = 0, errors = 0;
    long border_hidden = 0;
    for (int it = 0; it < ITERS; it++) {
        struct trn_aug_hyp hyp;
        trn_aug_hyp_default(&hyp);
        hyp.hsv_h = hyp.hsv_s = hyp.hsv_v = 0;
        hyp.translate = 0.3 * urand(NULL);
        hyp.scale = 0.5 * urand(NULL);
        hyp.flipud = hyp.fliplr = 0.5;
        hyp.mosaic = 1;
        hyp.copy_paste = 1;
        struct trn_aug_draws d;
        trn_aug_draws_fill(&hyp, S, urand, NULL, &d);
        d.copy_paste_key[0] = (uint64_t)(urand(NULL) * 0x1p53);
        int colour = irand(0, N_COLOURS - 1);
        struct trn_aug_tile tiles[4];
        for (int t = 0; t < 4; t++) {
            int w = S, h = irand(S / 3, S);
            if (urand(NULL) < 0.5) w = h, h = S;
            make_tile(&tb[t], w, h, true, &colour);
            tiles[t] = tb[t].t;
        }
        const int n = trn_aug_train_sample(ws, &hyp, &d, tiles, 4, out, rows, 128);
        if (n < 0) {
            if (errors++ < 3) tap_diag("train_sample: %s", trn_aug_strerror(n));
            continue;
        }
        int per[N_COLOURS] = { 0 };
        double bx[128][4];
        for (int i = 0; i < n; i++) {
            const float *r = rows + 5 * i;
            bx[i][0] = (r[1] - r[3] / 2) * S, bx[i][2] = (r[1] + r[3] / 2) * S;
            bx[i][1] = (r[2] - r[4] / 2) * S, bx[i][3] = (r[2] + r[4] / 2) * S;
            copies += per[(int)r[0]]++ == 1;
        }
        static int seen[128];
        memset(seen, 0, sizeof seen);
        for (int y = 1; y + 1 < S; y++)
            for (int x = 1; x + 1 < S; x++) {
                const uint8_t *p = out + ((size_t)y * S + x) * 3;
                int c = 0;
                while (c < N_COLOURS && memcmp(p, g_pal[c], 3))
                    c++;
                if (c == N_COLOURS || memcmp(p, p - 3, 3) || memcmp(p, p + 3, 3) ||
                    memcmp(p, p - 3 * S, 3) || memcmp(p, p + 3 * S, 3))
                    continue; /* interior pixels only: edges are blends */
                checked++;
                bool in = false;
                for (int i = 0; i < n; i++) {
                    if ((int)rows[5 * i] != c) continue;
                    if (x >= bx[i][0] - 2 && x <= bx[i][2] + 2 && y >= bx[i][1] - 2 &&
                        y <= bx[i][3] + 2) {
                        in = true;
                        seen[i] = 1;
                    }
                }
                if (!in && outside++ < 5)
                    tap_diag("colour %d pixel (%d, %d) in none of its %d boxes", c, x, y, per[c]);
            }
        for (int i = 0; i < n; i++) {
            if (bx[i][2] - bx[i][0] < 6 || bx[i][3] - bx[i][1] < 6) continue;
            boxes++;
            if (seen[i]) continue;
            bool covered = true; /* every pixel of the box inside some other box */
            for (int y = (int)ceil(bx[i][1]); covered && y < (int)bx[i][3]; y++)
                for (int x = (int)ceil(bx[i][0]); covered && x < (int)bx[i][2]; x++) {
                    bool any = false;
                    for (int j = 0; j < n && !any; j++)
                        any = j != i && x >= bx[j][0] && x <= bx[j][2] && y >= bx[j][1] &&
                              y <= bx[j][3];
                    covered = any;
                }
            /* at the output's border the warp may have kept only the part of a label that a
             * copy hides (up to 30% of its canvas box): its pixels are then all gone */
            const bool at_border =
                bx[i][0] <= 0.5 || bx[i][1] <= 0.5 || bx[i][2] >= S - 0.5 || bx[i][3] >= S - 0.5;
            if (!covered && at_border)
                border_hidden++;
            else if (!covered && invented++ < 5)
                tap_diag("box of colour %d [%.1f,%.1f]-[%.1f,%.1f] holds none of its pixels",
                         (int)rows[5 * i], bx[i][0], bx[i][1], bx[i][2], bx[i][3]);
        }
    }
    is_int(errors, 0, "copy_paste: %d samples run", ITERS);
    ok(copies > ITERS / 2 && checked > 10000,
       "copy_paste: %ld mirrored copies labelled, %ld boxes, %ld exact pixels checked", copies,
       boxes, checked);
    is_int(outside, 0, "copy_paste: every exact pixel inside one of its colour's boxes (2 px)");
    is_int(invented, 0, "copy_paste: no box without its colour (unless others cover it)");
    tap_diag("copy_paste: boxes at the output border whose visible part a copy hides: %ld",
             border_hidden);
    trn_aug_ws_destroy(ws);
}

int main(void)
{
    make_palette();
    test_random_settings(false);
    test_random_settings(true);
    test_mixup();
    test_copy_paste();
    return tap_done();
}
