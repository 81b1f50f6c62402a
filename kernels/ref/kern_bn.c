/*
 * Batch norm (BatchNorm2d), SiLU, and BN+SiLU fused, CPU reference.
 *
 * Shapes (NCHW, float32, dense): x, y, dx, dy (n, c, hw) with hw = h * w; gamma, beta,
 * running_mean, running_var, save_mean, save_invstd, dgamma, dbeta (c). SiLU ops take flat
 * element counts.
 *
 * Training forward: per channel, mean and biased variance over N = n * hw elements (summed in
 * double, two passes); invstd = 1 / sqrt(var + eps); y = x * a + b with a = gamma * invstd,
 * b = beta - mean * a. Running stats: r = (1 - m) r + m s, with the unbiased variance
 * var * N / (N - 1). Eval forward uses the running stats.
 * Backward (batch stats): xhat = (x - mean) invstd, dbeta = sum dy, dgamma = sum dy xhat,
 * dx = gamma invstd (dy - dbeta / N - xhat dgamma / N).
 * Fused BN+SiLU: z = bn(x), y = silu(z); the backward recomputes z from x and the saved stats
 * (z is never stored) and runs the BN backward on dz = dy silu'(z).
 *
 * Gradients: dx overwrites unless accum has KERN_ACCUM_DX; dgamma and dbeta overwrite unless
 * accum has KERN_ACCUM_DPARAM. Overwritten buffers are never read.
 * Threads: channels (BN) or element ranges (SiLU) are split over the context's threads; every
 * value is computed the same way whatever the split, so results do not depend on the count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kern_internal.h"

void kern_bn_init(struct kern_bn *d, int n, int c, int hw)
{
    if (!d) return;
    d->n = n;
    d->c = c;
    d->hw = hw;
    d->eps = KERN_BN_EPS;
    d->momentum = KERN_BN_MOMENTUM;
}

static int bn_check(const struct kern_bn *d)
{
    if (!d || d->n < 1 || d->c < 1 || d->hw < 1) return -EINVAL;
    if (!(d->eps >= 0.0f) || !(d->momentum >= 0.0f && d->momentum <= 1.0f)) return -EINVAL;
    return 0;
}

/*
 * exp(v) for v in [-87.3, 88.7], vectorisable: no libm call, no branch, only float and int32
 * arithmetic. n = round(v / ln 2) by the 1.5 * 2^23 trick (the integer sits in the low mantissa
 * bits), r = v - n ln 2 in two parts (Cody-Waite), exp(r) by the degree-6 polynomial of Cephes'
 * expf (relative error about 1 ulp), then 2^n added into the exponent field. Callers clamp v.
 */
static inline float bn_expf(float v)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    const float t = v * 1.44269504088896341f + magic;
    const float nf = t - magic;
    uint32_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    const uint32_t n = tb - mb; /* round(v log2 e), two's complement */
    const float r = (v - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t pb;
    memcpy(&pb, &p, sizeof pb);
    pb += n << 23;
    memcpy(&p, &pb, sizeof p);
    return p;
}

/* 1 / (1 + exp(-v)) for any float v (clamped where exp(-v) leaves the float range). */
static inline float sigmoidf_(float v)
{
    float m = -v;
    m = m < -87.0f ? -87.0f : m;
    m = m > 88.0f ? 88.0f : m;
    return 1.0f / (1.0f + bn_expf(m));
}

static inline float silu_grad(float v)
{
    const float s = sigmoidf_(v);
    return s * (1.0f + v * (1.0f - s));
}

/*
 * Sums in float over chunks that stay in L1, BN_LANES independent lanes (so that the compiler
 * can vectorise a float reduction without reassociating), then the chunk totals in double: the
 * error is that of a BN_CHUNK / BN_LANES element float sum, far below the tests' tolerances.
 */
#define BN_LANES 16
#define BN_CHUNK 1024

static double lanes_sum(const float *acc)
{
    double s = 0.0;
    for (int k = 0; k < BN_LANES; k++)
        s += acc[k];
    return s;
}

/* Sum of x[0..len), len <= BN_CHUNK. */
KERN_VEC_CLONES static float chunk_sum(const float *restrict x, size_t len)
{
    float acc[BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + BN_LANES <= len; j += BN_LANES)
        for (int k = 0; k < BN_LANES; k++)
            acc[k] += x[j + k];
    for (; j < len; j++)
        acc[0] += x[j];
    return (float)lanes_sum(acc);
}

/* Sum of (x - m)^2 over x[0..len), len <= BN_CHUNK. */
KERN_VEC_CLONES static float chunk_sq(const float *restrict x, size_t len, float m)
{
    float acc[BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + BN_LANES <= len; j += BN_LANES)
        for (int k = 0; k < BN_LANES; k++) {
            const float t = x[j + k] - m;
            acc[k] += t * t;
        }
    for (; j < len; j++) {
        const float t = x[j] - m;
        acc[0] += t * t;
    }
    return (float)lanes_sum(acc);
}

/* Everything a BN op needs, shared by its workers; each worker takes a range of channels. */
struct bn_job {
    const struct kern_bn *d;
    float *y, *dx, *dgamma, *dbeta; /* outputs (NULL where unused) */
    float *save_mean, *save_invstd, *running_mean, *running_var;
    const float *x, *dy, *gamma, *beta;                    /* inputs */
    const float *mean_in, *invstd_in, *rmean_in, *rvar_in; /* saved or running stats */
    unsigned accum;
    int silu;
};

/* Batch statistics of channel c, plus the optional saves and running-stat update. */
static void bn_channel_stats(const struct kern_bn *d, int c, const float *restrict x,
                             double *mean_out, double *invstd_out, float *restrict save_mean,
                             float *restrict save_invstd, float *restrict running_mean,
                             float *restrict running_var)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    const double cnt = (double)d->n * (double)hw;
    /*
     * One pass over memory: each L1-sized chunk is read twice (its sum, then its squares about
     * its own float mean), and the chunks are merged in double (Chan et al.'s pairwise update),
     * which keeps the two-pass accuracy without a second trip through a plane larger than L2.
     */
    double mean = 0.0, q = 0.0, seen = 0.0;
    for (int i = 0; i < d->n; i++) {
        const float *const xc = x + (size_t)i * plane + (size_t)c * hw;
        for (size_t j0 = 0; j0 < hw; j0 += BN_CHUNK) {
            const size_t len = hw - j0 < BN_CHUNK ? hw - j0 : BN_CHUNK;
            const double nb = (double)len;
            const double mb = (double)chunk_sum(xc + j0, len) / nb;
            const float mf = (float)mb;
            /* sum (x - mb)^2 = sum (x - mf)^2 - len (mb - mf)^2 */
            const double qb =
                (double)chunk_sq(xc + j0, len, mf) - nb * (mb - (double)mf) * (mb - (double)mf);
            const double tot = seen + nb, delta = mb - mean;
            mean += delta * nb / tot;
            q += qb + delta * delta * seen * nb / tot;
            seen = tot;
        }
    }
    const double var = q / cnt;
    const double invstd = 1.0 / sqrt(var + (double)d->eps);
    *mean_out = mean;
    *invstd_out = invstd;
    if (save_mean) save_mean[c] = (float)mean;
    if (save_invstd) save_invstd[c] = (float)invstd;
    if (running_mean) {
        const double m = d->momentum;
        running_mean[c] = (float)((1.0 - m) * running_mean[c] + m * mean);
        running_var[c] = (float)((1.0 - m) * running_var[c] + m * var * cnt / (cnt - 1.0));
    }
}

/* y = x a + b (then SiLU) over channel c, for every image. */
KERN_VEC_CLONES static void bn_apply_channel(const struct kern_bn *d, int c, float *restrict y,
                                             const float *restrict x, float a, float b, int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    for (int i = 0; i < d->n; i++) {
        const float *const xc = x + (size_t)i * plane + (size_t)c * hw;
        float *const yc = y + (size_t)i * plane + (size_t)c * hw;
        if (silu) {
            for (size_t j = 0; j < hw; j++) {
                const float z = xc[j] * a + b;
                yc[j] = z * sigmoidf_(z);
            }
        } else {
            for (size_t j = 0; j < hw; j++)
                yc[j] = xc[j] * a + b;
        }
    }
}

static void bn_train_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++) {
        double mean, invstd;
        bn_channel_stats(j->d, c, j->x, &mean, &invstd, j->save_mean, j->save_invstd,
                         j->running_mean, j->running_var);
        const float a = (float)(j->gamma[c] * invstd);
        const float b = (float)(j->beta[c] - mean * j->gamma[c] * invstd);
        bn_apply_channel(j->d, c, j->y, j->x, a, b, j->silu);
    }
}

static int bn_fwd_train_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                               float *restrict save_mean, float *restrict save_invstd,
                               float *restrict running_mean, float *restrict running_var,
                               const float *restrict x, const float *restrict gamma,
                               const float *restrict beta, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta, -EINVAL);
    KERN_RETURN_IF(!running_mean != !running_var, -EINVAL);
    KERN_RETURN_IF(running_mean && (size_t)d->n * (size_t)d->hw < 2, -EINVAL);
    struct bn_job j = { .d = d,
                        .y = y,
                        .save_mean = save_mean,
                        .save_invstd = save_invstd,
                        .running_mean = running_mean,
                        .running_var = running_var,
                        .x = x,
                        .gamma = gamma,
                        .beta = beta,
                        .silu = silu };
    kern_parallel(ctx, bn_train_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                          float *restrict save_mean, float *restrict save_invstd,
                          float *restrict running_mean, float *restrict running_var,
                          const float *restrict x, const float *restrict gamma,
                          const float *restrict beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 0);
}

int kern_ref_bn_silu_fwd_train(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                               float *restrict save_mean, float *restrict save_invstd,
                               float *restrict running_mean, float *restrict running_var,
                               const float *restrict x, const float *restrict gamma,
                               const float *restrict beta)
{
    return bn_fwd_train_common(ctx, d, y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, 1);
}

static void bn_eval_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++) {
        const double invstd = 1.0 / sqrt((double)j->rvar_in[c] + (double)j->d->eps);
        const float a = (float)(j->gamma[c] * invstd);
        const float b = (float)(j->beta[c] - j->rmean_in[c] * (double)j->gamma[c] * invstd);
        bn_apply_channel(j->d, c, j->y, j->x, a, b, j->silu);
    }
}

static int bn_fwd_eval_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                              const float *restrict x, const float *restrict gamma,
                              const float *restrict beta, const float *restrict running_mean,
                              const float *restrict running_var, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    const int rc = bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!y || !x || !gamma || !beta || !running_mean || !running_var, -EINVAL);
    struct bn_job j = { .d = d,
                        .y = y,
                        .x = x,
                        .gamma = gamma,
                        .beta = beta,
                        .rmean_in = running_mean,
                        .rvar_in = running_var,
                        .silu = silu };
    kern_parallel(ctx, bn_eval_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict running_mean,
                         const float *restrict running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 0);
}

int kern_ref_bn_silu_fwd_eval(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict y,
                              const float *restrict x, const float *restrict gamma,
                              const float *restrict beta, const float *restrict running_mean,
                              const float *restrict running_var)
{
    return bn_fwd_eval_common(ctx, d, y, x, gamma, beta, running_mean, running_var, 1);
}

/*
 * Pass 1 of the BN backward over x[0..len), len <= BN_CHUNK: dz = dy silu'(z) (z recomputed
 * from x) parked in gz, plus the chunk's sums of dz and dz xhat.
 */
KERN_VEC_CLONES static void bwd_chunk_silu(float *restrict gz, const float *restrict dy,
                                           const float *restrict x, size_t len, float mean,
                                           float invstd, float g, float bt, float *sdy, float *sdyx)
{
    for (size_t j = 0; j < len; j++) {
        const float xh = (x[j] - mean) * invstd;
        gz[j] = dy[j] * silu_grad(xh * g + bt);
    }
    float a1[BN_LANES] = { 0 }, a2[BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + BN_LANES <= len; j += BN_LANES)
        for (int k = 0; k < BN_LANES; k++) {
            const float v = gz[j + k];
            a1[k] += v;
            a2[k] += v * ((x[j + k] - mean) * invstd);
        }
    for (; j < len; j++) {
        a1[0] += gz[j];
        a2[0] += gz[j] * ((x[j] - mean) * invstd);
    }
    *sdy = (float)lanes_sum(a1);
    *sdyx = (float)lanes_sum(a2);
}

/* The sums of pass 1 without SiLU: dz is dy itself. */
KERN_VEC_CLONES static void bwd_chunk_plain(const float *restrict dy, const float *restrict x,
                                            size_t len, float mean, float invstd, float *sdy,
                                            float *sdyx)
{
    float a1[BN_LANES] = { 0 }, a2[BN_LANES] = { 0 };
    size_t j = 0;
    for (; j + BN_LANES <= len; j += BN_LANES)
        for (int k = 0; k < BN_LANES; k++) {
            const float v = dy[j + k];
            a1[k] += v;
            a2[k] += v * ((x[j + k] - mean) * invstd);
        }
    for (; j < len; j++) {
        a1[0] += dy[j];
        a2[0] += dy[j] * ((x[j] - mean) * invstd);
    }
    *sdy = (float)lanes_sum(a1);
    *sdyx = (float)lanes_sum(a2);
}

/*
 * The BN backward for one channel. With silu, dy is the gradient of silu(z) and is turned into
 * dz on the fly (z recomputed from x); when dx is overwritten, the first pass parks dz in dx so
 * the second pass need not recompute it; when dx accumulates, dz goes through a stack chunk.
 */
KERN_VEC_CLONES static void bn_bwd_channel(const struct kern_bn *d, int c, float *restrict dx,
                                           float *restrict dgamma, float *restrict dbeta,
                                           const float *restrict dy, const float *restrict x,
                                           const float *restrict gamma, const float *restrict beta,
                                           float mean, float invstd, unsigned accum, int silu)
{
    const size_t hw = (size_t)d->hw, plane = (size_t)d->c * hw;
    const int add_dx = (accum & KERN_ACCUM_DX) != 0;
    const float g = gamma[c], bt = silu ? beta[c] : 0.0f;
    float tmp[BN_CHUNK];
    double sdy = 0.0, sdyx = 0.0;
    for (int i = 0; i < d->n; i++) {
        const size_t off = (size_t)i * plane + (size_t)c * hw;
        for (size_t j0 = 0; j0 < hw; j0 += BN_CHUNK) {
            const size_t len = hw - j0 < BN_CHUNK ? hw - j0 : BN_CHUNK;
            float s1, s2;
            if (silu)
                bwd_chunk_silu(add_dx ? tmp : dx + off + j0, dy + off + j0, x + off + j0, len, mean,
                               invstd, g, bt, &s1, &s2);
            else
                bwd_chunk_plain(dy + off + j0, x + off + j0, len, mean, invstd, &s1, &s2);
            sdy += s1;
            sdyx += s2;
        }
    }
    if (dgamma) {
        if (accum & KERN_ACCUM_DPARAM) {
            dgamma[c] += (float)sdyx;
            dbeta[c] += (float)sdy;
        } else {
            dgamma[c] = (float)sdyx;
            dbeta[c] = (float)sdy;
        }
    }
    const double cnt = (double)d->n * (double)hw;
    const float mdy = (float)(sdy / cnt), mdyx = (float)(sdyx / cnt), k = g * invstd;
    for (int i = 0; i < d->n; i++) {
        const size_t off = (size_t)i * plane + (size_t)c * hw;
        const float *const xc = x + off, *const dyc = dy + off;
        float *const dxc = dx + off;
        if (silu && !add_dx) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] = k * (dxc[j] - mdy - xh * mdyx);
            }
        } else if (!silu && !add_dx) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] = k * (dyc[j] - mdy - xh * mdyx);
            }
        } else if (!silu) {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] += k * (dyc[j] - mdy - xh * mdyx);
            }
        } else {
            for (size_t j = 0; j < hw; j++) {
                const float xh = (xc[j] - mean) * invstd;
                dxc[j] += k * (dyc[j] * silu_grad(xh * g + bt) - mdy - xh * mdyx);
            }
        }
    }
}

static void bn_bwd_task(void *arg, int w, int nw)
{
    const struct bn_job *const j = arg;
    size_t lo, hi;
    kern_share((size_t)j->d->c, w, nw, &lo, &hi);
    for (int c = (int)lo; c < (int)hi; c++)
        bn_bwd_channel(j->d, c, j->dx, j->dgamma, j->dbeta, j->dy, j->x, j->gamma, j->beta,
                       j->mean_in[c], j->invstd_in[c], j->accum, j->silu);
}

static int bn_bwd_common(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                         float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict save_mean,
                         const float *restrict save_invstd, unsigned accum, int silu)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    const int rc = bn_check(d);
    if (rc < 0) return rc;
    KERN_RETURN_IF(!dx || !dy || !x || !gamma || !save_mean || !save_invstd, -EINVAL);
    KERN_RETURN_IF(!dgamma != !dbeta, -EINVAL);
    KERN_RETURN_IF(silu && !beta, -EINVAL);
    struct bn_job j = { .d = d,
                        .dx = dx,
                        .dgamma = dgamma,
                        .dbeta = dbeta,
                        .x = x,
                        .dy = dy,
                        .gamma = gamma,
                        .beta = beta,
                        .mean_in = save_mean,
                        .invstd_in = save_invstd,
                        .accum = accum,
                        .silu = silu };
    kern_parallel(ctx, bn_bwd_task, &j, (size_t)d->n * d->c * (size_t)d->hw);
    return 0;
}

int kern_ref_bn_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                    float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                    const float *restrict x, const float *restrict gamma,
                    const float *restrict save_mean, const float *restrict save_invstd,
                    unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, NULL, save_mean, save_invstd,
                         accum, 0);
}

int kern_ref_bn_silu_bwd(struct kern_ctx *ctx, const struct kern_bn *d, float *restrict dx,
                         float *restrict dgamma, float *restrict dbeta, const float *restrict dy,
                         const float *restrict x, const float *restrict gamma,
                         const float *restrict beta, const float *restrict save_mean,
                         const float *restrict save_invstd, unsigned accum)
{
    return bn_bwd_common(ctx, d, dx, dgamma, dbeta, dy, x, gamma, beta, save_mean, save_invstd,
                         accum, 1);
}

struct silu_job {
    float *y;        /* fwd: y; bwd: dx */
    const float *x;  /* the SiLU input */
    const float *dy; /* bwd only */
    size_t count;
    int add; /* bwd: dx += */
};

KERN_VEC_CLONES static void silu_fwd_task(void *arg, int w, int nw)
{
    const struct silu_job *const j = arg;
    size_t lo, hi;
    kern_share(j->count, w, nw, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const float v = j->x[i];
        j->y[i] = v * sigmoidf_(v);
    }
}

int kern_ref_silu_fwd(struct kern_ctx *ctx, float *y, const float *x, size_t count)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_RETURN_IF(!y || !x, -EINVAL);
    struct silu_job j = { y, x, NULL, count, 0 };
    kern_parallel(ctx, silu_fwd_task, &j, count);
    return 0;
}

KERN_VEC_CLONES static void silu_bwd_task(void *arg, int w, int nw)
{
    const struct silu_job *const j = arg;
    size_t lo, hi;
    kern_share(j->count, w, nw, &lo, &hi);
    if (j->add) {
        for (size_t i = lo; i < hi; i++)
            j->y[i] += j->dy[i] * silu_grad(j->x[i]);
    } else {
        for (size_t i = lo; i < hi; i++)
            j->y[i] = j->dy[i] * silu_grad(j->x[i]);
    }
}

int kern_ref_silu_bwd(struct kern_ctx *ctx, float *dx, const float *dy, const float *restrict x,
                      size_t count, unsigned accum)
{
    KERN_CHECK_CPU_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    KERN_RETURN_IF(!dx || !dy || !x, -EINVAL);
    KERN_RETURN_IF((accum & KERN_ACCUM_DX) && dx == dy, -EINVAL);
    struct silu_job j = { dx, x, dy, count, (accum & KERN_ACCUM_DX) != 0 };
    kern_parallel(ctx, silu_bwd_task, &j, count);
    return 0;
}
