/*
 * Training BN + SiLU (+ residual) on channel-blocked activations (kern_cpu.h "BN + SiLU on
 * channel blocks"), the passes of the CPU oneDNN executor's Conv.
 *
 * Layout: slice s = image * (cpad / blk) + block covers hw positions of blk lanes (lane l of
 * position p at s * hw * blk + p * blk + l), blk 8 or 16; lane l is channel block * blk + l.
 * y and dy may be a channel slice of a wider tensor (images y_nstride apart), and so may x and
 * dx (x_nstride): the executor's C3 runs cv1 and cv2 as one conv, each BN over its slice.
 * The per-slice passes touch only their slice's data and sums, so a caller may run them on
 * any threads in any order; the merges add the slices in image order, so results do not depend
 * on the thread count.
 *
 * Arithmetic as the NCHW ops of kern_bn.c: z = x a + b in the forward, z recomputed as
 * xhat gamma + beta (xhat = (x - mean) invstd) in the backward, y = z sigmoid(z), the same
 * sigmoid (kern_bn_common.h). Sums run in float over chunks of BLK_CHUNK positions that stay in
 * L1 and are merged in double: the forward's moments by Chan et al.'s pairwise update (each
 * chunk read twice: its mean, then the squared deviations from it), so no float sum of squares
 * cancels. The backward's passes read operands the forward wrote long before, and ask for their
 * lines ahead (KERN_PREFETCH); the forward's follow the conv that wrote theirs, in cache.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "compiler.h"
#include "kern_bn_common.h"
#include "kern_cpu_internal.h"

/* positions per float partial sum: 64 x 16 floats = 4 KiB, still in L1 for the chunk's second
   read */
#define BLK_CHUNK 64
#define BLK_MAX   16

/* inlined into each blk's instance, so that the lane loops have a constant trip count */
#define BLK_INLINE static inline __attribute__((always_inline))

static size_t slice_at(const struct kern_bnblk *p, long s)
{
    return (size_t)s * p->hw * (size_t)p->blk;
}

/* The same in a tensor whose images lie nstride floats apart (0: dense): y and dy step
   y_nstride, x and dx x_nstride. */
static size_t slice_at_ns(const struct kern_bnblk *p, long s, size_t nstride)
{
    const long nb = p->cpad / p->blk;
    const size_t img = nstride ? nstride : (size_t)p->cpad * p->hw;
    return (size_t)(s / nb) * img + (size_t)(s % nb) * p->hw * (size_t)p->blk;
}

static size_t slice_at_y(const struct kern_bnblk *p, long s)
{
    return slice_at_ns(p, s, p->y_nstride);
}

static size_t slice_at_x(const struct kern_bnblk *p, long s)
{
    return slice_at_ns(p, s, p->x_nstride);
}

/* The slice's channel values of one per-channel array. */
static size_t lane0(const struct kern_bnblk *p, long s)
{
    return (size_t)(s % (p->cpad / p->blk)) * (size_t)p->blk;
}

/* Moments of x - shift, shift the lane's first value: a channel whose mean is far from 0 (1000
 * std) would otherwise lose its chunk means to float rounding (6e-5 of 1000), and the variance
 * 1e-5 with them; shifted, the float sums see values near 0. */
BLK_INLINE void moments_l(const float *restrict x, size_t hw, const int L, double *restrict mean,
                          double *restrict m2)
{
    double n = 0;
    float k[BLK_MAX];
    for (int l = 0; l < L; l++) {
        mean[l] = m2[l] = 0;
        k[l] = x[l];
    }
    for (size_t p0 = 0; p0 < hw; p0 += BLK_CHUNK) {
        const size_t len = hw - p0 < BLK_CHUNK ? hw - p0 : BLK_CHUNK;
        const float *const c = x + p0 * (size_t)L;
        float s[BLK_MAX] = { 0 }, q[BLK_MAX] = { 0 }, cm[BLK_MAX];
        for (size_t p = 0; p < len; p++)
            for (int l = 0; l < L; l++)
                s[l] += c[p * (size_t)L + (size_t)l] - k[l];
        for (int l = 0; l < L; l++)
            cm[l] = s[l] / (float)len;
        for (size_t p = 0; p < len; p++)
            for (int l = 0; l < L; l++) {
                const float e = (c[p * (size_t)L + (size_t)l] - k[l]) - cm[l];
                q[l] += e * e;
            }
        const double cn = (double)len, tot = n + cn;
        for (int l = 0; l < L; l++) {
            const double delta = (double)cm[l] - mean[l];
            mean[l] += delta * cn / tot;
            m2[l] += (double)q[l] + delta * delta * n * cn / tot;
        }
        n = tot;
    }
    for (int l = 0; l < L; l++)
        mean[l] += (double)k[l];
}

KERN_VEC_CLONES void kern_cpu_bnblk_moments(const struct kern_bnblk *p, long s, const float *x)
{
    const size_t at = (size_t)s * (size_t)p->blk;
    if (p->blk == 16)
        moments_l(x + slice_at_x(p, s), p->hw, 16, p->s1 + at, p->s2 + at);
    else
        moments_l(x + slice_at_x(p, s), p->hw, 8, p->s1 + at, p->s2 + at);
}

/* Channel ch's mean and M2 over the batch, the slices merged in image order (Chan et al.). */
static void merged(const struct kern_bnblk *p, int ch, double *mean, double *m2)
{
    const double hw = (double)p->hw;
    double mu = 0, q = 0, k = 0;
    for (int i = 0; i < p->n; i++) {
        const size_t at = (size_t)i * (size_t)p->cpad + (size_t)ch;
        const double delta = p->s1[at] - mu, tot = k + hw;
        mu += delta * hw / tot;
        q += p->s2[at] + delta * delta * k * hw / tot;
        k = tot;
    }
    *mean = mu;
    *m2 = q;
}

void kern_cpu_bnblk_fwd_sums(const struct kern_bnblk *p, double *sums)
{
    const double count = (double)p->n * (double)p->hw;
    for (int ch = 0; ch < p->c; ch++) {
        double mu, q;
        merged(p, ch, &mu, &q);
        sums[ch] = count * mu;
        sums[p->c + ch] = q + count * mu * mu;
    }
    sums[2 * p->c] = count;
}

double kern_cpu_bnblk_fwd_coef(const struct kern_bnblk *p, const float *gamma, const float *beta,
                               const double *sums)
{
    const double count = sums ? sums[2 * p->c] : (double)p->n * (double)p->hw;
    for (int ch = 0; ch < p->c; ch++) {
        double mu, var;
        if (sums) {
            kern_bn_sums_moments(sums, (size_t)p->c, (size_t)ch, &mu, &var);
        } else {
            double q;
            merged(p, ch, &mu, &q);
            var = q / count;
        }
        const double invstd = 1.0 / sqrt(var + (double)p->eps);
        const double g = gamma[ch], be = beta[ch];
        p->mean[ch] = (float)mu;
        p->var[ch] = (float)var;
        p->invstd[ch] = (float)invstd;
        p->gamma[ch] = (float)g;
        p->beta[ch] = (float)be;
        p->a[ch] = (float)(g * invstd);
        p->b[ch] = (float)(be - mu * g * invstd);
    }
    return count;
}

BLK_INLINE void silu_fwd_l(float *restrict y, const float *restrict x, const float *restrict r,
                           size_t hw, const int L, const float *restrict a, const float *restrict b)
{
    const size_t len = hw * (size_t)L;
    if (r) {
        for (size_t p = 0; p < len; p += (size_t)L)
            for (int l = 0; l < L; l++) {
                const float z = x[p + (size_t)l] * a[l] + b[l];
                y[p + (size_t)l] = z * kern_bn_sigmoid(z) + r[p + (size_t)l];
            }
    } else {
        for (size_t p = 0; p < len; p += (size_t)L)
            for (int l = 0; l < L; l++) {
                const float z = x[p + (size_t)l] * a[l] + b[l];
                y[p + (size_t)l] = z * kern_bn_sigmoid(z);
            }
    }
}

KERN_VEC_CLONES void kern_cpu_bnblk_silu_fwd(const struct kern_bnblk *p, long s, float *y,
                                             const float *x, const float *r)
{
    const size_t at = slice_at(p, s), c0 = lane0(p, s);
    y += slice_at_y(p, s);
    x += slice_at_x(p, s);
    if (p->blk == 16)
        silu_fwd_l(y, x, r ? r + at : NULL, p->hw, 16, p->a + c0, p->b + c0);
    else
        silu_fwd_l(y, x, r ? r + at : NULL, p->hw, 8, p->a + c0, p->b + c0);
}

/* The backward's coefficients of one slice, in locals: the vectoriser keeps them in registers. */
struct coef_l {
    float mean[BLK_MAX], invstd[BLK_MAX], gamma[BLK_MAX], beta[BLK_MAX], k[BLK_MAX], m1[BLK_MAX],
        m2[BLK_MAX];
};

BLK_INLINE void coef_load(struct coef_l *c, const struct kern_bnblk *p, size_t c0, const int L)
{
    for (int l = 0; l < L; l++) {
        c->mean[l] = p->mean[c0 + (size_t)l];
        c->invstd[l] = p->invstd[c0 + (size_t)l];
        c->gamma[l] = p->gamma[c0 + (size_t)l];
        c->beta[l] = p->beta[c0 + (size_t)l];
        c->k[l] = p->k[c0 + (size_t)l];
        c->m1[l] = p->m1[c0 + (size_t)l];
        c->m2[l] = p->m2[c0 + (size_t)l];
    }
}

BLK_INLINE void silu_bwd_sums_l(const float *restrict dy, const float *restrict x, size_t hw,
                                const int L, const struct coef_l *restrict k, double *restrict s1,
                                double *restrict s2, float *restrict rdx, int radd)
{
    /* the residual's share of the gradient while dy streams in: a copy, or added */
    const size_t all = hw * (size_t)L;
    if (rdx && radd)
        for (size_t i = 0; i < all; i++)
            rdx[i] += dy[i];
    else if (rdx)
        memcpy(rdx, dy, all * sizeof *dy);
    for (int l = 0; l < L; l++)
        s1[l] = s2[l] = 0;
    for (size_t p0 = 0; p0 < hw; p0 += BLK_CHUNK) {
        const size_t len = hw - p0 < BLK_CHUNK ? hw - p0 : BLK_CHUNK;
        const float *const xc = x + p0 * (size_t)L, *const gc = dy + p0 * (size_t)L;
        float t1[BLK_MAX] = { 0 }, t2[BLK_MAX] = { 0 };
        for (size_t p = 0; p < len; p++) {
            KERN_PREFETCH(xc + p * (size_t)L, KERN_AHEAD);
            KERN_PREFETCH(gc + p * (size_t)L, KERN_AHEAD);
            for (int l = 0; l < L; l++) {
                const size_t i = p * (size_t)L + (size_t)l;
                const float xh = (xc[i] - k->mean[l]) * k->invstd[l];
                const float dz = gc[i] * kern_bn_silu_grad(xh * k->gamma[l] + k->beta[l]);
                t1[l] += dz;
                t2[l] += dz * xh;
            }
        }
        for (int l = 0; l < L; l++) {
            s1[l] += (double)t1[l];
            s2[l] += (double)t2[l];
        }
    }
}

KERN_VEC_CLONES void kern_cpu_bnblk_silu_bwd_sums(const struct kern_bnblk *p, long s,
                                                  const float *dy, const float *x, float *rdx,
                                                  int radd)
{
    const size_t at = slice_at(p, s), c0 = lane0(p, s), sa = (size_t)s * (size_t)p->blk;
    struct coef_l k;
    dy += slice_at_y(p, s);
    x += slice_at_x(p, s);
    if (rdx) rdx += at;
    if (p->blk == 16) {
        coef_load(&k, p, c0, 16);
        silu_bwd_sums_l(dy, x, p->hw, 16, &k, p->s1 + sa, p->s2 + sa, rdx, radd);
    } else {
        coef_load(&k, p, c0, 8);
        silu_bwd_sums_l(dy, x, p->hw, 8, &k, p->s1 + sa, p->s2 + sa, rdx, radd);
    }
}

void kern_cpu_bnblk_bwd_sums(const struct kern_bnblk *p, double *sums, float *dgamma, float *dbeta)
{
    for (int ch = 0; ch < p->c; ch++) {
        double a = 0, b = 0;
        for (int i = 0; i < p->n; i++) {
            a += p->s1[(size_t)i * (size_t)p->cpad + (size_t)ch];
            b += p->s2[(size_t)i * (size_t)p->cpad + (size_t)ch];
        }
        dbeta[ch] += (float)a;
        dgamma[ch] += (float)b;
        sums[ch] = a;
        sums[p->c + ch] = b;
    }
    sums[2 * p->c] = (double)p->n * (double)p->hw;
}

void kern_cpu_bnblk_bwd_coef(const struct kern_bnblk *p, const double *sums)
{
    const double count = sums[2 * p->c];
    for (int ch = 0; ch < p->c; ch++) {
        p->k[ch] = p->gamma[ch] * p->invstd[ch];
        p->m1[ch] = (float)(sums[ch] / count);
        p->m2[ch] = (float)(sums[p->c + ch] / count);
    }
}

BLK_INLINE void silu_bwd_dx_l(float *restrict dx, const float *restrict dy, const float *restrict x,
                              size_t hw, const int L, const struct coef_l *restrict k)
{
    const size_t len = hw * (size_t)L;
    for (size_t p = 0; p < len; p += (size_t)L) {
        KERN_PREFETCH(x + p, KERN_AHEAD);
        KERN_PREFETCH(dy + p, KERN_AHEAD);
        for (int l = 0; l < L; l++) {
            const size_t i = p + (size_t)l;
            const float xh = (x[i] - k->mean[l]) * k->invstd[l];
            const float dz = dy[i] * kern_bn_silu_grad(xh * k->gamma[l] + k->beta[l]);
            dx[i] = k->k[l] * (dz - k->m1[l] - xh * k->m2[l]);
        }
    }
}

KERN_VEC_CLONES void kern_cpu_bnblk_silu_bwd_dx(const struct kern_bnblk *p, long s, float *dx,
                                                const float *dy, const float *x)
{
    const size_t at = slice_at_x(p, s), c0 = lane0(p, s);
    struct coef_l k;
    dy += slice_at_y(p, s);
    if (p->blk == 16) {
        coef_load(&k, p, c0, 16);
        silu_bwd_dx_l(dx + at, dy, x + at, p->hw, 16, &k);
    } else {
        coef_load(&k, p, c0, 8);
        silu_bwd_dx_l(dx + at, dy, x + at, p->hw, 8, &k);
    }
}
