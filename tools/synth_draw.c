/*
 * synth_draw: RNG, backgrounds, shape outlines and polygon rasterisation for yolo-synth.
 * See synth_draw.h for the coordinate conventions.
 */
#include "synth_draw.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- RNG ---------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void synth_rng_init(struct synth_rng *rng, uint64_t seed, uint64_t stream)
{
    /* Hash both words so that nearby (seed, stream) pairs start far apart on the counter. */
    rng->state = mix64(mix64(seed ^ 0x5eed5eed5eed5eedULL) + stream * 0x9e3779b97f4a7c15ULL + 1);
}

uint64_t synth_rng_next(struct synth_rng *rng)
{
    rng->state += 0x9e3779b97f4a7c15ULL;
    return mix64(rng->state);
}

uint32_t synth_rng_below(struct synth_rng *rng, uint32_t n)
{
    if (n == 0) return 0;
    /* Lemire's multiply-shift; the bias for n < 2^32 over 64 bits is far below anything we see. */
    return (uint32_t)(((synth_rng_next(rng) >> 32) * (uint64_t)n) >> 32);
}

double synth_rng_uniform(struct synth_rng *rng, double lo, double hi)
{
    const double u = (double)(synth_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return lo + (hi - lo) * u;
}

/* ---- classes ------------------------------------------------------------------------------ */

enum {
    SHAPE_RECTANGLE,
    SHAPE_ELLIPSE,
    SHAPE_TRIANGLE,
    SHAPE_CROSS,
    SHAPE_RING,
    SHAPE_DIAMOND,
    SHAPE_STAR,
    SHAPE_ARROW,
    SHAPE_HEXAGON,
    SHAPE_FRAME,
    SHAPE_ELL,
    SHAPE_TEE,
    SHAPE_SEMICIRCLE,
    SHAPE_CRESCENT,
    SHAPE_TRAPEZOID,
    SHAPE_HOURGLASS,
};

/* The first 8 (the default --classes) are the most distinct shapes and hues. */
static const struct {
    const char *name;
    uint8_t rgb[3];
    int turns; /* drawn in four 90-degree orientations */
} classes[SYNTH_MAX_CLASSES] = {
    { "rectangle", { 225, 35, 35 }, 0 },   { "ellipse", { 30, 185, 50 }, 0 },
    { "triangle", { 40, 75, 235 }, 1 },    { "cross", { 235, 215, 30 }, 0 },
    { "ring", { 215, 40, 215 }, 0 },       { "diamond", { 25, 205, 220 }, 0 },
    { "star", { 250, 130, 20 }, 0 },       { "arrow", { 125, 35, 200 }, 1 },
    { "hexagon", { 150, 235, 25 }, 0 },    { "frame", { 20, 120, 175 }, 0 },
    { "ell", { 175, 15, 85 }, 1 },         { "tee", { 235, 20, 140 }, 1 },
    { "semicircle", { 15, 170, 115 }, 1 }, { "crescent", { 175, 95, 10 }, 1 },
    { "trapezoid", { 90, 170, 250 }, 1 },  { "hourglass", { 95, 255, 145 }, 0 },
};

const char *synth_class_name(int k)
{
    return k >= 0 && k < SYNTH_MAX_CLASSES ? classes[k].name : NULL;
}

void synth_class_colour(int k, uint8_t rgb[3])
{
    if (k < 0 || k >= SYNTH_MAX_CLASSES) {
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    memcpy(rgb, classes[k].rgb, 3);
}

int synth_class_turns(int k)
{
    return k >= 0 && k < SYNTH_MAX_CLASSES ? classes[k].turns : 0;
}

/* ---- outlines ----------------------------------------------------------------------------- */

/* Outlines are built in the unit box [-1, 1]^2 (y down) and then placed by the geometry. */
struct outline {
    struct synth_point *p;
    int n;
    int cap;
};

static void put(struct outline *o, double x, double y)
{
    if (o->n < o->cap) o->p[o->n] = (struct synth_point){ x, y };
    o->n++;
}

static void put_list(struct outline *o, const double *xy, int count)
{
    for (int i = 0; i < count; i++)
        put(o, xy[2 * i], xy[2 * i + 1]);
}

/* Arc of the circle (cx, cy, r) from angle a0 to a1 (radians, y down), steps + 1 points. */
static void put_arc(struct outline *o, double cx, double cy, double r, double a0, double a1,
                    int steps)
{
    for (int i = 0; i <= steps; i++) {
        const double a = a0 + (a1 - a0) * i / steps;
        put(o, cx + r * cos(a), cy + r * sin(a));
    }
}

static void unit_outline(int k, struct outline *o)
{
    switch (k) {
    case SHAPE_RECTANGLE: {
        static const double v[] = { -1, -1, 1, -1, 1, 1, -1, 1 };
        put_list(o, v, 4);
        break;
    }
    case SHAPE_ELLIPSE:
        put_arc(o, 0, 0, 1, 0, 2 * M_PI * 47 / 48, 47);
        break;
    case SHAPE_TRIANGLE: {
        static const double v[] = { 0, -1, 1, 1, -1, 1 };
        put_list(o, v, 3);
        break;
    }
    case SHAPE_CROSS: {
        const double t = 0.34;
        const double v[] = { -t, -1, t,  -1, t,  -t, 1,  -t, 1,  t,  t,  t,
                             t,  1,  -t, 1,  -t, t,  -1, t,  -1, -t, -t, -t };
        put_list(o, v, 12);
        break;
    }
    case SHAPE_RING:
        /* Outer circle one way, inner circle back the other way, joined by a zero-width slit. */
        put_arc(o, 0, 0, 1, 0, 2 * M_PI, 40);
        put_arc(o, 0, 0, 0.55, 2 * M_PI, 0, 40);
        break;
    case SHAPE_DIAMOND: {
        static const double v[] = { 0, -1, 1, 0, 0, 1, -1, 0 };
        put_list(o, v, 4);
        break;
    }
    case SHAPE_STAR:
        for (int i = 0; i < 10; i++) {
            const double a = -M_PI / 2 + i * M_PI / 5;
            const double r = (i & 1) ? 0.42 : 1.0;
            put(o, r * cos(a), r * sin(a));
        }
        break;
    case SHAPE_ARROW: {
        static const double v[] = { -1, -0.35, 0.15, -0.35, 0.15, -1, 1,
                                    0,  0.15,  1,    0.15,  0.35, -1, 0.35 };
        put_list(o, v, 7);
        break;
    }
    case SHAPE_HEXAGON: {
        static const double v[] = { 1, 0, 0.5, 1, -0.5, 1, -1, 0, -0.5, -1, 0.5, -1 };
        put_list(o, v, 6);
        break;
    }
    case SHAPE_FRAME: {
        const double t = 0.55;
        const double v[] = {
            -1, -1, 1, -1, 1, 1, -1, 1, -1, -1, -t, -t, -t, t, t, t, t, -t, -t, -t
        };
        put_list(o, v, 10);
        break;
    }
    case SHAPE_ELL: {
        static const double v[] = { -1, -1, -0.3, -1, -0.3, 0.3, 1, 0.3, 1, 1, -1, 1 };
        put_list(o, v, 6);
        break;
    }
    case SHAPE_TEE: {
        static const double v[] = { -1,  -1, 1,    -1, 1,    -0.35, 0.3, -0.35,
                                    0.3, 1,  -0.3, 1,  -0.3, -0.35, -1,  -0.35 };
        put_list(o, v, 8);
        break;
    }
    case SHAPE_SEMICIRCLE:
        /* Flat side down; the arc spans the full unit box height. */
        for (int i = 0; i <= 32; i++) {
            const double a = M_PI * i / 32;
            put(o, cos(a), 1 - 2 * sin(a));
        }
        break;
    case SHAPE_CRESCENT: {
        /* Unit disc minus the disc of radius r centred at (d, 0): outer arc round the left from
         * the top intersection to the bottom one, then the inner arc back. */
        const double d = 0.5, r = 0.85;
        const double ix = (1 - r * r + d * d) / (2 * d), iy = sqrt(1 - ix * ix);
        const double a0 = atan2(-iy, ix); /* top intersection on the unit circle (y down) */
        const double b0 = atan2(iy, ix - d), b1 = atan2(-iy, ix - d);
        put_arc(o, 0, 0, 1, a0, -a0 - 2 * M_PI, 36);
        put_arc(o, d, 0, r, b0, b1 + 2 * M_PI, 28);
        o->n--; /* the last inner point repeats the first outer point */
        break;
    }
    case SHAPE_TRAPEZOID: {
        static const double v[] = { -0.5, -1, 0.5, -1, 1, 1, -1, 1 };
        put_list(o, v, 4);
        break;
    }
    case SHAPE_HOURGLASS: {
        static const double v[] = { -1, -1, 1, -1, 0.15, 0, 1, 1, -1, 1, -0.15, 0 };
        put_list(o, v, 6);
        break;
    }
    default:
        o->n = -1;
        break;
    }
}

int synth_shape_outline(int k, const struct synth_shape_geom *g, struct synth_point *pts, int cap)
{
    struct outline o = { pts, 0, cap };
    if (k < 0 || k >= SYNTH_MAX_CLASSES || !g) return -EINVAL;
    unit_outline(k, &o);
    if (o.n < 3 || o.n > cap) return -EINVAL;
    const double c = cos(g->angle), s = sin(g->angle);
    for (int i = 0; i < o.n; i++) {
        const double x = pts[i].x * g->hx, y = pts[i].y * g->hy;
        pts[i].x = g->cx + x * c - y * s;
        pts[i].y = g->cy + x * s + y * c;
    }
    return o.n;
}

/* ---- clipping and rasterisation ----------------------------------------------------------- */

/* One Sutherland-Hodgman stage against the half-plane sign * (coord(p) - lim) <= 0. */
static int clip_stage(const struct synth_point *in, int n, int axis_y, double lim, double sign,
                      struct synth_point *out, int cap)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        const struct synth_point a = in[i], b = in[(i + 1) % n];
        const double da = sign * ((axis_y ? a.y : a.x) - lim);
        const double db = sign * ((axis_y ? b.y : b.x) - lim);
        if (da <= 0) {
            if (m >= cap) return -ENOSPC;
            out[m++] = a;
        }
        if ((da <= 0) != (db <= 0)) {
            const double t = da / (da - db);
            struct synth_point q = { a.x + t * (b.x - a.x), a.y + t * (b.y - a.y) };
            if (axis_y)
                q.y = lim;
            else
                q.x = lim;
            if (m >= cap) return -ENOSPC;
            out[m++] = q;
        }
    }
    return m;
}

int synth_poly_clip(const struct synth_point *in, int n, double w, double h,
                    struct synth_point *out, int cap)
{
    struct synth_point tmp[SYNTH_CLIPPED_MAX];
    int m;
    if (n < 3) return 0;
    /* Ping-pong between tmp and out so the result lands in out. */
    m = clip_stage(in, n, 0, 0.0, -1.0, out, cap);
    if (m < 0) return m;
    m = clip_stage(out, m, 0, w, 1.0, tmp, cap < SYNTH_CLIPPED_MAX ? cap : SYNTH_CLIPPED_MAX);
    if (m < 0) return m;
    m = clip_stage(tmp, m, 1, 0.0, -1.0, out, cap);
    if (m < 0) return m;
    m = clip_stage(out, m, 1, h, 1.0, tmp, cap < SYNTH_CLIPPED_MAX ? cap : SYNTH_CLIPPED_MAX);
    if (m < 0) return m;
    if (m < 3) return 0;
    memcpy(out, tmp, (size_t)m * sizeof(*out));
    return m;
}

static void sort_doubles(double *v, int n)
{
    for (int i = 1; i < n; i++) {
        const double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

int synth_poly_spans(const struct synth_point *pts, int n, int w, int h, struct synth_span *spans,
                     int cap)
{
    double ymin = pts[0].y, ymax = pts[0].y;
    double xs[SYNTH_CLIPPED_MAX];
    int count = 0;
    if (n < 3 || n > SYNTH_CLIPPED_MAX) return n < 3 ? 0 : -ENOSPC;
    for (int i = 1; i < n; i++) {
        if (pts[i].y < ymin) ymin = pts[i].y;
        if (pts[i].y > ymax) ymax = pts[i].y;
    }
    int y0 = (int)floor(ymin - 0.5), y1 = (int)ceil(ymax - 0.5);
    if (y0 < 0) y0 = 0;
    if (y1 > h - 1) y1 = h - 1;
    for (int y = y0; y <= y1; y++) {
        const double yc = y + 0.5;
        int nx = 0;
        for (int i = 0; i < n; i++) {
            const struct synth_point a = pts[i], b = pts[(i + 1) % n];
            /* Half-open in y so a vertex on the scanline counts once. */
            if ((a.y <= yc) != (b.y <= yc)) xs[nx++] = a.x + (yc - a.y) * (b.x - a.x) / (b.y - a.y);
        }
        sort_doubles(xs, nx);
        for (int i = 0; i + 1 < nx; i += 2) {
            /* Pixel x is covered when xa <= x + 0.5 < xb. */
            int xa = (int)ceil(xs[i] - 0.5), xb = (int)ceil(xs[i + 1] - 0.5);
            if (xa < 0) xa = 0;
            if (xb > w) xb = w;
            if (xb <= xa) continue;
            if (count > 0 && spans[count - 1].y == y && spans[count - 1].x1 >= xa) {
                /* Touching runs (a slit) merge into one. */
                if (xb > spans[count - 1].x1) spans[count - 1].x1 = xb;
                continue;
            }
            if (count >= cap) return -ENOSPC;
            spans[count++] = (struct synth_span){ y, xa, xb };
        }
    }
    return count;
}

/* ---- backgrounds -------------------------------------------------------------------------- */

static int clamp_u8(int v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* Value-noise grid cells are at least this many pixels wide; sizes the scratch area. */
#define NOISE_CELL_MIN 12

unsigned long synth_background_scratch(int w, int h)
{
    const unsigned long gw = (unsigned long)(w / NOISE_CELL_MIN + 3);
    const unsigned long gh = (unsigned long)(h / NOISE_CELL_MIN + 3);
    /* grid + per-column cell index, weight, interpolated grid row, and a luminance row. */
    return (gw * gh + 4UL * (unsigned long)w + gw) * sizeof(int16_t);
}

void synth_background(uint8_t *rgb, int w, int h, struct synth_rng *rng, int16_t *scratch)
{
    /* Luminance = base + gradient + stripes + smooth noise + grain, then a faint tint per
     * channel: textured but nearly grey, so saturated shapes stand out (see synth_draw.h). */
    const int base = 80 + (int)synth_rng_below(rng, 91);
    int tint[3];
    for (int c = 0; c < 3; c++)
        tint[c] = (int)synth_rng_below(rng, 21) - 10;

    /* Pick the mix: at least two of gradient, stripes and noise. */
    static const unsigned mixes[4] = { 3, 5, 6, 7 };
    const unsigned mix = mixes[synth_rng_below(rng, 4)];
    const int use_grad = mix & 1, use_stripes = (mix >> 1) & 1, use_noise = (mix >> 2) & 1;

    /* Gradient in 1/256 grey levels per pixel, up to +-40 levels across the image. */
    int gx = 0, gy = 0;
    if (use_grad) {
        gx = (int)synth_rng_uniform(rng, -40.0 * 256 / w, 40.0 * 256 / w);
        gy = (int)synth_rng_uniform(rng, -40.0 * 256 / h, 40.0 * 256 / h);
    }

    /* Stripes: a one-period waveform table indexed by a fixed-point phase (1/65536 period). */
    int16_t wave[256];
    int dpx = 0, dpy = 0;
    if (use_stripes) {
        const double period = synth_rng_uniform(rng, 6.0, 80.0);
        const double theta = synth_rng_uniform(rng, 0.0, M_PI);
        const int amp = 6 + (int)synth_rng_below(rng, 23);
        const unsigned kind = synth_rng_below(rng, 3);
        dpx = (int)(65536.0 * cos(theta) / period);
        dpy = (int)(65536.0 * sin(theta) / period);
        for (int i = 0; i < 256; i++) {
            double v;
            if (kind == 0)
                v = sin(2 * M_PI * i / 256);
            else if (kind == 1)
                v = i < 128 ? i / 64.0 - 1 : 3 - i / 64.0; /* triangle */
            else
                v = i < 128 ? 1 : -1; /* square: hard edges, like tiles or blinds */
            wave[i] = (int16_t)lrint(amp * v);
        }
    } else {
        memset(wave, 0, sizeof(wave));
    }

    /* Smooth value noise on a coarse grid, bilinear in 1/256 steps. */
    const int cell = NOISE_CELL_MIN + (int)synth_rng_below(rng, 85);
    const int gw = w / cell + 3, gh = h / cell + 3;
    int16_t *grid = scratch;
    int16_t *col_idx = grid + gw * gh, *col_w = col_idx + w, *row = col_w + w;
    int16_t *lum = row + gw;
    const int noise_amp = use_noise ? 8 + (int)synth_rng_below(rng, 23) : 0;
    for (int i = 0; i < gw * gh; i++)
        grid[i] =
            (int16_t)(use_noise ? (int)synth_rng_below(rng, 2 * noise_amp + 1) - noise_amp : 0);
    for (int x = 0; x < w; x++) {
        col_idx[x] = (int16_t)(x / cell);
        col_w[x] = (int16_t)((x % cell) * 256 / cell);
    }

    const int grain = 2 + (int)synth_rng_below(rng, 6);
    uint32_t g = (uint32_t)synth_rng_next(rng) | 1u;
    for (int y = 0; y < h; y++) {
        const int cy = y / cell, wy = (y % cell) * 256 / cell;
        for (int j = 0; j < gw; j++)
            row[j] =
                (int16_t)((grid[cy * gw + j] * (256 - wy) + grid[(cy + 1) * gw + j] * wy) >> 8);
        const int lum0 = base * 256 + gy * (y - h / 2) - gx * (w / 2);
        for (int x = 0; x < w; x++) {
            const int ci = col_idx[x], wx = col_w[x];
            const int noise = (row[ci] * (256 - wx) + row[ci + 1] * wx) >> 8;
            const unsigned phase = (unsigned)(x * dpx + y * dpy);
            g ^= g << 13;
            g ^= g >> 17;
            g ^= g << 5;
            const int gr = (int)(g % (unsigned)(2 * grain + 1)) - grain;
            lum[x] = (int16_t)(((lum0 + gx * x) >> 8) + wave[(phase >> 8) & 255] + noise + gr);
        }
        uint8_t *p = rgb + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++) {
            p[3 * x + 0] = (uint8_t)clamp_u8(lum[x] + tint[0]);
            p[3 * x + 1] = (uint8_t)clamp_u8(lum[x] + tint[1]);
            p[3 * x + 2] = (uint8_t)clamp_u8(lum[x] + tint[2]);
        }
    }
}
