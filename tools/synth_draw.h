/*
 * synth_draw: the drawing half of yolo-synth (deterministic RNG, textured backgrounds, shape
 * outlines and their rasterisation). Kept apart from the program so the geometry can be read,
 * and reused by tests, without the file-writing code.
 *
 * Coordinates are in pixels with the origin at the top-left corner of the top-left pixel; pixel
 * (x, y) covers [x, x+1) x [y, y+1) and is "inside" a polygon when its centre (x+0.5, y+0.5) is,
 * by the even-odd rule. Everything here is a pure function of its arguments: no globals, no
 * locks, safe to call from any thread on distinct buffers.
 */
#ifndef FFYOLO_SYNTH_DRAW_H
#define FFYOLO_SYNTH_DRAW_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The number of shape classes the generator knows (and the cap on --classes). */
#define SYNTH_MAX_CLASSES 16

/* Vertices one shape outline may have before clipping (the rings use the most). */
#define SYNTH_OUTLINE_MAX 128

/* Vertices a clipped outline may have: each of the 4 clip edges adds at most one vertex per
 * input edge, so 2x per stage bounds it; in practice clipping adds a handful. */
#define SYNTH_CLIPPED_MAX (SYNTH_OUTLINE_MAX * 4)

/*
 * A counter-based random stream (splitmix64 over a 64-bit counter). Two streams seeded with
 * different (seed, stream) pairs are independent for our purposes, and a stream's output depends
 * only on its seed and how many values were drawn: that is what makes yolo-synth's output a pure
 * function of its arguments. Not cryptographic.
 */
struct synth_rng {
    uint64_t state; /* counter; advanced by a fixed odd constant per draw */
};

/*
 * synth_rng_init() - start a stream.
 * @rng:    out: the stream.
 * @seed:   user seed (yolo-synth --seed).
 * @stream: which stream under that seed (e.g. the image id); any value.
 */
void synth_rng_init(struct synth_rng *rng, uint64_t seed, uint64_t stream);

/* synth_rng_next() - the next 64 uniformly distributed bits of @rng. */
uint64_t synth_rng_next(struct synth_rng *rng);

/* synth_rng_below() - a uniform integer in [0, n); n must be >= 1 (returns 0 for n == 0). */
uint32_t synth_rng_below(struct synth_rng *rng, uint32_t n);

/* synth_rng_uniform() - a uniform double in [lo, hi) with 53 random bits. */
double synth_rng_uniform(struct synth_rng *rng, double lo, double hi);

/* A polygon vertex in pixel coordinates. */
struct synth_point {
    double x; /* pixels from the left edge */
    double y; /* pixels from the top edge */
};

/* A horizontal run of covered pixels: row y, columns [x0, x1). */
struct synth_span {
    int y;  /* row, 0 <= y < image height */
    int x0; /* first covered column, >= 0 */
    int x1; /* one past the last covered column, <= image width, > x0 */
};

/* Where and how big one shape is drawn. */
struct synth_shape_geom {
    double cx;    /* centre, pixels */
    double cy;    /* centre, pixels */
    double hx;    /* half extent along the shape's own x axis before rotation, pixels, > 0 */
    double hy;    /* half extent along the shape's own y axis before rotation, pixels, > 0 */
    double angle; /* rotation, radians, clockwise on screen (y grows downwards) */
};

/*
 * synth_class_name() - the name of class @k ("rectangle", "ellipse", ...).
 * Returns a static string, or NULL when k is outside [0, SYNTH_MAX_CLASSES).
 */
const char *synth_class_name(int k);

/*
 * synth_class_colour() - the nominal RGB fill colour of class @k. Every class colour is strongly
 * saturated (max - min channel >= 150) while backgrounds are nearly grey, so a shape's pixels can
 * be told from the background by saturation alone. Writes rgb[0..2]; k outside the range gives
 * mid grey.
 */
void synth_class_colour(int k, uint8_t rgb[3]);

/*
 * synth_class_turns() - whether class @k's shape looks different when turned by 90 degree steps
 * (arrows, triangles, ...), so the generator draws it in all four orientations. 0 or 1.
 */
int synth_class_turns(int k);

/*
 * synth_shape_outline() - the outline of class @k's shape placed by @g.
 * @pts, @cap: out: the vertices, in order; cap >= SYNTH_OUTLINE_MAX always suffices.
 * Holes (ring, frame) are traced with a zero-width slit, so the even-odd rule fills the shape and
 * the same list is a valid single COCO polygon.
 * Returns the vertex count (>= 3), or -EINVAL for an unknown class or too small @cap.
 */
int synth_shape_outline(int k, const struct synth_shape_geom *g, struct synth_point *pts, int cap);

/*
 * synth_poly_clip() - clip a polygon to the rectangle [0, w] x [0, h] (Sutherland-Hodgman). The
 * covered pixels inside the rectangle are the same before and after.
 * @in, @n:    the polygon.
 * @out, @cap: out: the clipped polygon; cap >= 2^4 * n always suffices, SYNTH_CLIPPED_MAX for
 *             outlines from synth_shape_outline() in practice.
 * Returns the vertex count (0 when nothing is left inside), or -ENOSPC when @cap is too small.
 */
int synth_poly_clip(const struct synth_point *in, int n, double w, double h,
                    struct synth_point *out, int cap);

/*
 * synth_poly_spans() - rasterise a polygon (even-odd, pixel centres) within a w x h image.
 * @spans, @cap: out: the covered runs, rows ascending and columns ascending within a row.
 * Returns the span count (0 when no pixel centre is covered), or -ENOSPC when @cap is too small.
 */
int synth_poly_spans(const struct synth_point *pts, int n, int w, int h, struct synth_span *spans,
                     int cap);

/*
 * synth_background() - fill a w x h RGB image (rows of 3*w bytes, no padding) with a textured,
 * low-saturation background: a mix of gradients, stripes, smooth value noise and grain drawn from
 * @rng. Never flat. Channel spread (max - min) stays small, see synth_class_colour().
 * @scratch: caller-owned work area of at least synth_background_scratch(w, h) bytes.
 */
void synth_background(uint8_t *rgb, int w, int h, struct synth_rng *rng, int16_t *scratch);

/* synth_background_scratch() - the bytes synth_background() needs as @scratch for a w x h image. */
unsigned long synth_background_scratch(int w, int h);

#ifdef __cplusplus
}
#endif

#endif
