/*
 * Concat (channel-slice copies) and residual add CPU references (kern_ref_concat_*,
 * kern_ref_add_*).
 *
 * Concat: building SPPF's cat[x, y1, y2, y3] and C3's cat[m, cv2] slice by slice equals a naive
 * torch.cat(dim=1); channels outside a slice keep their canaries; the backward extracts each
 * slice (overwrite and accumulate). Add: y = a + b, in place on either operand, and the backward
 * copy / accumulate. Pure copies and single adds: results must be bit-exact.
 */
#include <errno.h>

#include "kern_testutil.h"

static void check_concat(int n, const int *cs, int parts, int hw)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    int c_y = 0;
    for (int p = 0; p < parts; p++)
        c_y += cs[p];
    float *xs[8], *dxs[8];
    const size_t ny = (size_t)n * c_y * hw;
    float *const y = kt_alloc(ny), *const ref = kt_alloc(ny), *const dy = kt_alloc(ny);
    for (int p = 0; p < parts; p++) {
        const size_t nx = (size_t)n * cs[p] * hw;
        xs[p] = kt_alloc(nx);
        dxs[p] = kt_alloc(nx);
        kt_fill(xs[p], nx, -1, 1);
    }
    /* naive torch.cat(xs, 1) */
    for (int i = 0; i < n; i++) {
        int off = 0;
        for (int p = 0; p < parts; p++) {
            for (int c = 0; c < cs[p]; c++)
                for (int j = 0; j < hw; j++)
                    ref[((size_t)i * c_y + off + c) * hw + j] =
                        xs[p][((size_t)i * cs[p] + c) * hw + j];
            off += cs[p];
        }
    }
    kt_poison(y, ny);
    is_int(kern_ref_concat_fwd(ctx, y, xs[0], n, cs[0], hw, c_y, 0), 0, "concat first slice");
    size_t canaries = 0;
    for (int i = 0; i < n; i++)
        for (int c = cs[0]; c < c_y; c++)
            for (int j = 0; j < hw; j++)
                canaries += kt_is_canary(y[((size_t)i * c_y + c) * hw + j]);
    ok(canaries == (size_t)n * (c_y - cs[0]) * hw,
       "concat writes only its slice: %zu channels-outside values keep the canary", canaries);
    int off = cs[0];
    for (int p = 1; p < parts; p++) {
        kern_ref_concat_fwd(ctx, y, xs[p], n, cs[p], hw, c_y, off);
        off += cs[p];
    }
    ok(!memcmp(y, ref, ny * 4), "concat of %d parts (n %d, c_y %d) equals torch.cat", parts, n,
       c_y);

    kt_fill(dy, ny, -1, 1);
    off = 0;
    size_t bad = 0, bad_acc = 0;
    for (int p = 0; p < parts; p++) {
        const size_t nx = (size_t)n * cs[p] * hw;
        kt_poison(dxs[p], nx);
        kern_ref_concat_bwd(ctx, dxs[p], dy, n, cs[p], hw, c_y, off, 0);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < cs[p]; c++)
                for (int j = 0; j < hw; j++)
                    bad += dxs[p][((size_t)i * cs[p] + c) * hw + j] !=
                           dy[((size_t)i * c_y + off + c) * hw + j];
        kern_ref_concat_bwd(ctx, dxs[p], dy, n, cs[p], hw, c_y, off, KERN_ACCUM_DX);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < cs[p]; c++)
                for (int j = 0; j < hw; j++)
                    bad_acc += dxs[p][((size_t)i * cs[p] + c) * hw + j] !=
                               2.0f * dy[((size_t)i * c_y + off + c) * hw + j];
        off += cs[p];
    }
    ok(bad == 0, "concat bwd (=) extracts each slice (%zu mismatches)", bad);
    ok(bad_acc == 0, "concat bwd (+=) adds each slice (%zu mismatches)", bad_acc);
    is_int(kern_ref_concat_fwd(ctx, y, xs[0], n, cs[0], hw, c_y, c_y - cs[0] + 1), -EINVAL,
           "slice past the end refused");
    for (int p = 0; p < parts; p++)
        free(xs[p]), free(dxs[p]);
    free(y), free(ref), free(dy);
    kern_ctx_destroy(ctx);
}

static void check_add(void)
{
    struct kern_ctx *const ctx = kt_ctx(0);
    const size_t n = 1000;
    float *const a = kt_alloc(n), *const b = kt_alloc(n), *const y = kt_alloc(n);
    float *const a2 = kt_alloc(n), *const dx = kt_alloc(n);
    kt_fill(a, n, -1, 1);
    kt_fill(b, n, -1, 1);
    kt_poison(y, n);
    is_int(kern_ref_add_fwd(ctx, y, a, b, n), 0, "add runs");
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += y[i] != a[i] + b[i];
    ok(bad == 0, "add: y == a + b (%zu mismatches)", bad);
    memcpy(a2, a, n * 4);
    kern_ref_add_fwd(ctx, a2, a2, b, n);
    ok(!memcmp(a2, y, n * 4), "add in place on a");
    memcpy(a2, b, n * 4);
    kern_ref_add_fwd(ctx, a2, a, a2, n);
    ok(!memcmp(a2, y, n * 4), "add in place on b");
    kt_poison(dx, n);
    kern_ref_add_bwd(ctx, dx, a, n, 0);
    ok(!memcmp(dx, a, n * 4), "add bwd (=) copies dy");
    kern_ref_add_bwd(ctx, dx, b, n, KERN_ACCUM_DX);
    ok(!memcmp(dx, y, n * 4), "add bwd (+=) accumulates dy");
    is_int(kern_ref_add_bwd(ctx, dx, b, n, 4u), -EINVAL, "unknown accum bit refused");
    {
        /* Threaded add: ranges split over 3 threads, same values. */
        struct kern_ctx *const c3 = kt_ctx_threads(3);
        const size_t m = 100003;
        float *const p = kt_alloc(m), *const q = kt_alloc(m), *const r = kt_alloc(m);
        kt_fill(p, m, -1, 1);
        kt_fill(q, m, -1, 1);
        kt_poison(r, m);
        kern_ref_add_fwd(c3, r, p, q, m);
        size_t bad3 = 0;
        for (size_t i = 0; i < m; i++)
            bad3 += r[i] != p[i] + q[i];
        kern_ref_add_bwd(c3, r, p, m, KERN_ACCUM_DX);
        for (size_t i = 0; i < m; i++)
            bad3 += r[i] != (p[i] + q[i]) + p[i];
        ok(bad3 == 0, "add fwd and bwd (+=) with 3 threads over %zu values (%zu wrong)", m, bad3);
        free(p), free(q), free(r);
        kern_ctx_destroy(c3);
    }
    free(a), free(b), free(y), free(a2), free(dx);
    kern_ctx_destroy(ctx);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 13);
    const int sppf[4] = { 4, 4, 4, 4 }, c3[2] = { 3, 5 }, one[1] = { 6 };
    check_concat(2, sppf, 4, 9);
    check_concat(3, c3, 2, 7);
    check_concat(1, one, 1, 5);
    check_add();
    return tap_done();
}
