/*
 * copy_paste (augment.h): ultralytics v7.0 utils/augmentations.py copy_paste on a mosaic canvas,
 * and the polygon fill it draws its mask with (cv2.drawContours(..., cv2.FILLED), which is
 * OpenCV's fillPoly: LINE_8 outlines, then an edge-list scanline fill in 16.16 fixed point).
 * The fill follows OpenCV 4.x's rules (drawing.cpp: clipLine, LineIterator, CollectPolyEdges,
 * FillEdgeCollection) and is compared pixel for pixel with Debian's OpenCV 4.6 in
 * tests/trainer/test_augment.c (make_copypaste_refs.py).
 */
#include "augment.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XY_SHIFT 16
#define XY_ONE   (INT64_C(1) << XY_SHIFT)

/* clipLine: Cohen-Sutherland against [0, w-1] x [0, h-1] with OpenCV's truncating integer
 * steps. Returns whether anything of the segment is left. */
static bool clip_line(int64_t w, int64_t h, int64_t *x1, int64_t *y1, int64_t *x2, int64_t *y2)
{
    const int64_t right = w - 1, bottom = h - 1;
    if (w <= 0 || h <= 0) return false;
    int c1 = (*x1 < 0) + (*x1 > right) * 2 + (*y1 < 0) * 4 + (*y1 > bottom) * 8;
    int c2 = (*x2 < 0) + (*x2 > right) * 2 + (*y2 < 0) * 4 + (*y2 > bottom) * 8;
    if ((c1 & c2) == 0 && (c1 | c2) != 0) {
        int64_t a;
        if (c1 & 12) {
            a = c1 < 8 ? 0 : bottom;
            *x1 += (a - *y1) * (*x2 - *x1) / (*y2 - *y1);
            *y1 = a;
            c1 = (*x1 < 0) + (*x1 > right) * 2;
        }
        if (c2 & 12) {
            a = c2 < 8 ? 0 : bottom;
            *x2 += (a - *y2) * (*x2 - *x1) / (*y2 - *y1);
            *y2 = a;
            c2 = (*x2 < 0) + (*x2 > right) * 2;
        }
        if ((c1 & c2) == 0 && (c1 | c2) != 0) {
            if (c1) {
                a = c1 == 1 ? 0 : right;
                *y1 += (a - *x1) * (*y2 - *y1) / (*x2 - *x1);
                *x1 = a;
                c1 = 0;
            }
            if (c2) {
                a = c2 == 1 ? 0 : right;
                *y2 += (a - *x2) * (*y2 - *y1) / (*x2 - *x1);
                *x2 = a;
                c2 = 0;
            }
        }
    }
    return (c1 | c2) == 0;
}

/* Line(img, p1, p2, color, 8): the 8-connected LineIterator walk, left to right. */
static void line8(uint8_t *m, int w, int h, int64_t x1, int64_t y1, int64_t x2, int64_t y2,
                  uint8_t v)
{
    if (x1 < 0 || x1 >= w || x2 < 0 || x2 >= w || y1 < 0 || y1 >= h || y2 < 0 || y2 >= h) {
        /* LineIterator clips int Points: the values were ints already */
        if (!clip_line(w, h, &x1, &y1, &x2, &y2)) return;
    }
    if (x2 < x1) { /* left to right */
        int64_t t = x1;
        x1 = x2, x2 = t;
        t = y1, y1 = y2, y2 = t;
    }
    int64_t dx = x2 - x1, dy = y2 - y1;
    const int64_t sy = dy < 0 ? -1 : 1;
    dy = dy < 0 ? -dy : dy;
    const bool steep = dy > dx;
    const int64_t major = steep ? dy : dx, minor = steep ? dx : dy;
    int64_t err = major - 2 * minor, x = x1, y = y1;
    for (int64_t i = 0; i <= major; i++) {
        m[(size_t)y * (size_t)w + (size_t)x] = v;
        const bool step_minor = err < 0;
        err += -2 * minor + (step_minor ? 2 * major : 0);
        if (steep) {
            y += sy;
            if (step_minor) x += 1;
        } else {
            x += 1;
            if (step_minor) y += sy;
        }
    }
}

struct poly_edge {
    int y0, y1;
    int64_t x, dx;
};

/* CmpEdges: by y0, then x, then dx. */
static int edge_cmp(const void *pa, const void *pb)
{
    const struct poly_edge *a = pa, *b = pb;
    if (a->y0 != b->y0) return a->y0 < b->y0 ? -1 : 1;
    if (a->x != b->x) return a->x < b->x ? -1 : 1;
    return (a->dx > b->dx) - (a->dx < b->dx);
}

int trn_aug_fill_poly(uint8_t *mask, int w, int h, const int32_t *xy, int n, uint8_t value)
{
    if (!mask || w < 1 || h < 1 || n < 0 || (n > 0 && !xy)) return -EINVAL;
    if (n == 0) return 0;
    struct poly_edge *e = malloc((size_t)n * sizeof *e);
    int *act = malloc((size_t)(n + 1) * sizeof *act), *nxt = malloc((size_t)(n + 1) * sizeof *nxt);
    if (!e || !act || !nxt) {
        free(e), free(act), free(nxt);
        return -ENOMEM;
    }
    /* CollectPolyEdges: the outline, and one edge per non-horizontal side (x in 16.16, dx the
     * truncated quotient of the side's x span by its rows) */
    int ne = 0;
    int64_t px = (int64_t)xy[2 * (n - 1)] * XY_ONE, py = xy[2 * (n - 1) + 1];
    for (int i = 0; i < n; i++) {
        const int64_t qx = (int64_t)xy[2 * i] * XY_ONE, qy = xy[2 * i + 1];
        line8(mask, w, h, (px + (XY_ONE >> 1)) >> XY_SHIFT, py, (qx + (XY_ONE >> 1)) >> XY_SHIFT,
              qy, value);
        if (py != qy) {
            struct poly_edge *E = &e[ne++];
            E->y0 = (int)(py < qy ? py : qy);
            E->y1 = (int)(py < qy ? qy : py);
            E->x = py < qy ? px : qx;
            E->dx = (qx - px) / (qy - py);
        }
        px = qx, py = qy;
    }
    /* FillEdgeCollection */
    int y_min = INT32_MAX, y_max = INT32_MIN;
    int64_t x_min = INT64_MAX, x_max = -1;
    for (int i = 0; i < ne; i++) {
        const int64_t x1 = e[i].x + (int64_t)(e[i].y1 - e[i].y0) * e[i].dx;
        y_min = e[i].y0 < y_min ? e[i].y0 : y_min;
        y_max = e[i].y1 > y_max ? e[i].y1 : y_max;
        x_min = e[i].x < x_min ? e[i].x : x_min;
        x_max = e[i].x > x_max ? e[i].x : x_max;
        x_min = x1 < x_min ? x1 : x_min;
        x_max = x1 > x_max ? x1 : x_max;
    }
    if (ne < 2 || y_max < 0 || y_min >= h || x_max < 0 || x_min >= ((int64_t)w << XY_SHIFT))
        goto out;
    qsort(e, (size_t)ne, sizeof *e, edge_cmp);
    if (y_max > h) y_max = h;
    int na = 0, next = 0;
    for (int y = e[0].y0; y < y_max; y++) {
        /* the active edges (x order) less those ending here, merged with those starting here
         * (a new edge goes before an active one of equal x) */
        int nn = 0, a = 0;
        while (a < na || (next < ne && e[next].y0 == y)) {
            if (a < na && e[act[a]].y1 == y) {
                a++;
                continue;
            }
            if (a < na && (next >= ne || e[next].y0 > y || e[act[a]].x < e[next].x))
                nxt[nn++] = act[a++];
            else
                nxt[nn++] = next++;
        }
        /* spans between edges 0-1, 2-3, ...: from the first pixel centre at or right of the
         * left edge to the last at or left of the right one; both edges then step */
        for (int i = 1; i < nn; i += 2) {
            struct poly_edge *l = &e[nxt[i - 1]], *r = &e[nxt[i]];
            if (y >= 0) {
                int64_t x1, x2;
                if (l->x > r->x) {
                    x1 = (r->x + XY_ONE - 1) >> XY_SHIFT;
                    x2 = l->x >> XY_SHIFT;
                } else {
                    x1 = (l->x + XY_ONE - 1) >> XY_SHIFT;
                    x2 = r->x >> XY_SHIFT;
                }
                if (x1 < w && x2 >= 0) {
                    if (x1 < 0) x1 = 0;
                    if (x2 >= w) x2 = w - 1;
                    if (x2 >= x1)
                        memset(mask + (size_t)y * (size_t)w + x1, value, (size_t)(x2 - x1 + 1));
                }
            }
            l->x += l->dx;
            r->x += r->dx;
        }
        /* the bubble sort by x: stable */
        for (int i = 1; i < nn; i++) {
            const int t = nxt[i];
            int j = i;
            for (; j > 0 && e[nxt[j - 1]].x > e[t].x; j--)
                nxt[j] = nxt[j - 1];
            nxt[j] = t;
        }
        memcpy(act, nxt, (size_t)nn * sizeof *act);
        na = nn;
    }
out:
    free(e), free(act), free(nxt);
    return 0;
}

/* splitmix64: the selection's generator, keyed by the sample's draw. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

int trn_aug_copy_paste_select(uint64_t key, int n, double p, int *sel)
{
    if (n < 0 || !(p >= 0 && p <= 1) || (n > 0 && !sel)) return -EINVAL;
    const int k = (int)nearbyint(p * n); /* Python's round(): half to even */
    for (int i = 0; i < n; i++)
        sel[i] = i;
    uint64_t st = key;
    for (int i = 0; i < k; i++) { /* random.sample: a partial Fisher-Yates */
        const int j = i + (int)((double)(mix64(&st) >> 11) * 0x1.0p-53 * (n - i));
        const int t = sel[i];
        sel[i] = sel[j];
        sel[j] = t;
    }
    return k;
}

int trn_aug_copy_paste_labels(struct trn_aug_boxes *b, int w, int h, const int *sel, int k,
                              uint8_t *mask)
{
    if (!b || !b->rows || !b->seg_n || w < 1 || h < 1 || k < 0 || (k && !sel) || !mask)
        return -EINVAL;
    memset(mask, 0, (size_t)w * (size_t)h);
    /* each row's first point: rows keep their order, so a prefix sum */
    size_t *first = malloc(((size_t)b->n + (size_t)k + 1) * sizeof *first);
    int32_t *ixy = NULL;
    if (!first) return -ENOMEM;
    size_t at = 0;
    for (int r = 0; r < b->n; r++) {
        first[r] = at;
        at += b->seg_n[r];
    }
    const int n0 = b->n;
    int added = 0, rc = 0;
    const float fw = (float)w;
    for (int q = 0; q < k && rc == 0; q++) {
        const int j = sel[q];
        if (j < 0 || j >= n0 || b->seg_n[j] == 0) {
            rc = -EINVAL;
            break;
        }
        const float *l = b->rows + 5 * (size_t)j;
        /* box = w - l[3], l[2], w - l[1], l[4]; bbox_ioa against every row so far, float32 */
        const float bx1 = fw - l[3], by1 = l[2], bx2 = fw - l[1], by2 = l[4];
        bool ok = true;
        for (int r = 0; r < b->n && ok; r++) {
            const float *o = b->rows + 5 * (size_t)r;
            const float iw = fmaxf(fminf(bx2, o[3]) - fmaxf(bx1, o[1]), 0.0f);
            const float ih = fmaxf(fminf(by2, o[4]) - fmaxf(by1, o[2]), 0.0f);
            const float area = (o[3] - o[1]) * (o[4] - o[2]) + 1e-7f;
            ok = iw * ih / area < 0.30f;
        }
        if (!ok) continue;
        const uint32_t np = b->seg_n[j];
        if (b->n >= b->cap_rows || b->n_points + np > b->cap_points) {
            rc = -ENOSPC;
            break;
        }
        float *nr = b->rows + 5 * (size_t)b->n;
        nr[0] = l[0], nr[1] = bx1, nr[2] = by1, nr[3] = bx2, nr[4] = by2;
        const float *src = b->seg_xy + 2 * first[j];
        float *dst = b->seg_xy + 2 * b->n_points;
        for (uint32_t i = 0; i < np; i++) {
            dst[2 * i] = fw - src[2 * i];
            dst[2 * i + 1] = src[2 * i + 1];
        }
        b->seg_n[b->n] = np;
        first[b->n] = b->n_points;
        b->n_points += np;
        b->n++;
        added++;
        /* the row's own polygon, segments[j].astype(np.int32), into the mask */
        int32_t *g = realloc(ixy, 2 * (size_t)np * sizeof *g);
        if (!g) {
            rc = -ENOMEM;
            break;
        }
        ixy = g;
        for (uint32_t i = 0; i < 2 * np; i++)
            ixy[i] = (int32_t)src[i]; /* truncation; the points are >= 0 (clipped) */
        rc = trn_aug_fill_poly(mask, w, h, ixy, (int)np, 1);
    }
    free(first);
    free(ixy);
    return rc < 0 ? rc : added;
}

void trn_aug_copy_paste_pixels(uint8_t *canvas, int w, int h, const uint8_t *mask)
{
    if (!canvas || !mask) return;
    for (int y = 0; y < h; y++) {
        uint8_t *row = canvas + (size_t)y * (size_t)w * 3;
        const uint8_t *m = mask + (size_t)y * (size_t)w;
        for (int x = 0, xr = w - 1; x < xr; x++, xr--) {
            /* im[i] = flip(im)[i], i = flip(mask): each pair from the values before */
            uint8_t a[3], b[3];
            memcpy(a, row + 3 * (size_t)x, 3);
            memcpy(b, row + 3 * (size_t)xr, 3);
            if (m[xr]) memcpy(row + 3 * (size_t)x, b, 3);
            if (m[x]) memcpy(row + 3 * (size_t)xr, a, 3);
        }
    }
}
