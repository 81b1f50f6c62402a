/* Reader of the parity dump; the format is in parity_dump.h and make_parity_ref.py. */
#include "parity_dump.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

struct pdump {
    unsigned char *buf; /* the whole file */
    size_t len;
    uint32_t version;
    int n;
    struct pdump_tensor *t; /* n entries, views into buf */
};

static const char MAGIC[12] = { 'Y', 'V', '5', 'P', 'A', 'R', 'I', 'T', 'Y', 0, 0, 0 };

static uint32_t rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const unsigned char *p)
{
    return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
}

static double rd_f64(const unsigned char *p)
{
    const uint64_t b = rd_u64(p);
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static int read_raw(const char *path, unsigned char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return errno ? -errno : -EIO;
    int rc = 0;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        rc = -EIO;
        goto out;
    }
    const long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = -EIO;
        goto out;
    }
    if ((unsigned long)n > PDUMP_MAX_BYTES) {
        rc = -EFBIG;
        goto out;
    }
    /* float data is read in place: malloc's alignment covers the 4-byte offsets */
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        rc = -EIO;
        goto out;
    }
    *out = buf;
    *len = (size_t)n;
    buf = NULL;
out:
    free(buf);
    fclose(f);
    return rc;
}

int pdump_read_file(const char *path, unsigned char **out, size_t *len)
{
    unsigned char *z = NULL;
    size_t zlen = 0;
    int rc = read_raw(path, &z, &zlen);
    if (rc) return rc;
    if (zlen < 4 || rd_u32(z) != ZSTD_MAGICNUMBER) {
        *out = z;
        *len = zlen;
        return 0;
    }
    /* One frame whose header states its size (zstd's CLI writes it): the size is checked
     * against the bound before anything is allocated, so a frame claiming terabytes costs
     * nothing, and ZSTD_decompress never writes past it. */
    const unsigned long long n = ZSTD_getFrameContentSize(z, zlen);
    unsigned char *buf = NULL;
    if (n == ZSTD_CONTENTSIZE_ERROR) {
        rc = -PDUMP_ECORRUPT;
    } else if (n == ZSTD_CONTENTSIZE_UNKNOWN || n > PDUMP_MAX_BYTES) {
        rc = -EFBIG;
    } else if (!(buf = malloc(n > 0 ? (size_t)n : 1))) {
        rc = -ENOMEM;
    } else {
        const size_t got = ZSTD_decompress(buf, (size_t)n, z, zlen);
        if (ZSTD_isError(got))
            rc = ZSTD_getErrorCode(got) == ZSTD_error_srcSize_wrong ? -PDUMP_ETRUNC
                                                                    : -PDUMP_ECORRUPT;
        else if (got != n)
            rc = -PDUMP_ETRUNC;
    }
    free(z);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)n;
    return 0;
}

static int parse_entry(const unsigned char *p, size_t avail, struct pdump_tensor *t, size_t *used)
{
    if (avail < PDUMP_ENTRY_HDR) return -PDUMP_ETRUNC;
    if (memchr(p, 0, PDUMP_NAME_LEN) == NULL || p[0] == 0) return -PDUMP_ECORRUPT;
    t->name = (const char *)p;
    const unsigned char *h = p + PDUMP_NAME_LEN;
    const uint32_t kind = rd_u32(h), ndim = rd_u32(h + 4);
    if (kind > PDUMP_SAMPLED || ndim > PDUMP_MAX_DIMS) return -PDUMP_ECORRUPT;
    t->kind = (enum pdump_kind)kind;
    t->ndim = (int)ndim;
    uint64_t prod = 1;
    for (int d = 0; d < PDUMP_MAX_DIMS; d++) {
        const uint32_t s = rd_u32(h + 8 + 4 * (size_t)d);
        if ((uint32_t)d >= ndim ? s != 0 : s > INT32_MAX) return -PDUMP_ECORRUPT;
        t->shape[d] = (int)s;
        if ((uint32_t)d < ndim) {
            if (s && prod > UINT64_MAX / s) return -PDUMP_ECORRUPT;
            prod *= s;
        }
    }
    const uint64_t numel = rd_u64(h + 40), n_stored = rd_u64(h + 48);
    if (numel != prod || n_stored > numel) return -PDUMP_ECORRUPT;
    if (kind == PDUMP_FULL ? n_stored != numel : n_stored == 0 || n_stored == numel)
        return -PDUMP_ECORRUPT;
    t->numel = (size_t)numel;
    t->n_stored = (size_t)n_stored;
    t->l2 = rd_f64(h + 56);
    t->l1 = rd_f64(h + 64);
    t->sum = rd_f64(h + 72);
    t->maxabs = rd_f64(h + 80);
    if (!isfinite(t->l2) || !isfinite(t->l1) || !isfinite(t->sum) || !isfinite(t->maxabs))
        return -PDUMP_ECORRUPT;
    if (n_stored > (avail - PDUMP_ENTRY_HDR) / 4) return -PDUMP_ETRUNC;
    const unsigned char *data = p + PDUMP_ENTRY_HDR;
    /* little-endian float32 read in place: every host we build for is little-endian */
    t->data = (const float *)(const void *)data;
    for (size_t i = 0; i < t->n_stored; i++)
        if (!isfinite(t->data[i])) return -PDUMP_ECORRUPT;
    *used = PDUMP_ENTRY_HDR + 4 * (size_t)n_stored;
    return 0;
}

void pdump_tol_default(struct pdump_tol *t)
{
    t->atol = 1e-5;
    t->atol_maxabs = 0;
    t->rtol = 1e-4;
    t->max_report = 5;
    t->check_samples = 1;
    t->check_stats = 1;
}

int pdump_open(const char *path, struct pdump **out)
{
    if (!path || !out) return -EINVAL;
    struct pdump *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    int rc = pdump_read_file(path, &d->buf, &d->len);
    if (rc) goto fail;
    const size_t cmp = d->len < sizeof MAGIC ? d->len : sizeof MAGIC;
    if (d->len == 0 || memcmp(d->buf, MAGIC, cmp) != 0) {
        rc = -PDUMP_EBADMAGIC;
        goto fail;
    }
    rc = -PDUMP_ETRUNC;
    if (d->len < PDUMP_HEADER) goto fail;
    d->version = rd_u32(d->buf + 12);
    if (d->version != PDUMP_VERSION) {
        rc = -PDUMP_EVERSION;
        goto fail;
    }
    const uint32_t n = rd_u32(d->buf + 16);
    if (rd_u64(d->buf + 24) != d->len) goto fail;
    rc = -PDUMP_ECORRUPT;
    if (rd_u32(d->buf + 20) != 0 || n > (d->len - PDUMP_HEADER) / PDUMP_ENTRY_HDR) goto fail;
    d->t = calloc(n ? n : 1, sizeof *d->t);
    if (!d->t) {
        rc = -ENOMEM;
        goto fail;
    }
    size_t pos = PDUMP_HEADER;
    for (uint32_t i = 0; i < n; i++) {
        size_t used = 0;
        rc = parse_entry(d->buf + pos, d->len - pos, &d->t[i], &used);
        if (rc) goto fail;
        pos += used;
        d->n = (int)i + 1;
        if (pdump_find(d, d->t[i].name) != &d->t[i]) {
            rc = -PDUMP_ECORRUPT;
            goto fail;
        }
    }
    if (pos != d->len) {
        rc = -PDUMP_ETRUNC;
        goto fail;
    }
    *out = d;
    return 0;
fail:
    pdump_close(d);
    return rc;
}

void pdump_close(struct pdump *d)
{
    if (!d) return;
    free(d->t);
    free(d->buf);
    free(d);
}

uint32_t pdump_version(const struct pdump *d)
{
    return d->version;
}

int pdump_count(const struct pdump *d)
{
    return d->n;
}

const struct pdump_tensor *pdump_at(const struct pdump *d, int i)
{
    return i >= 0 && i < d->n ? &d->t[i] : NULL;
}

const struct pdump_tensor *pdump_find(const struct pdump *d, const char *name)
{
    /* ~1700 entries, looked up a few hundred times per test: a linear scan is fine */
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->t[i].name, name) == 0) return &d->t[i];
    return NULL;
}

size_t pdump_index(const struct pdump_tensor *t, size_t i)
{
    if (t->kind == PDUMP_FULL) return i;
    /* numel < 2^32 and n_stored < 2^32 in any dump we write, so the product fits */
    return (size_t)(((uint64_t)i * t->numel) / t->n_stored);
}

void pdump_stats(const float *x, size_t numel, double out[4])
{
    double s2 = 0, s1 = 0, s = 0, mx = 0;
    for (size_t i = 0; i < numel; i++) {
        const double v = x[i];
        s2 += v * v;
        s1 += fabs(v);
        s += v;
        mx = fabs(v) > mx ? fabs(v) : mx;
    }
    out[0] = sqrt(s2);
    out[1] = s1;
    out[2] = s;
    out[3] = mx;
}

int pdump_compare(const struct pdump_tensor *t, const float *x, size_t numel,
                  const struct pdump_tol *tol, FILE *log, struct pdump_result *res)
{
    if (!t || !x) return -EINVAL;
    if (numel != t->numel) {
        if (log)
            fprintf(log, "# %s: %zu elements given, the reference has %zu\n", t->name, numel,
                    t->numel);
        return -EINVAL;
    }
    struct pdump_tol def;
    if (!tol) {
        pdump_tol_default(&def);
        tol = &def;
    }
    struct pdump_result r = { 0 };
    int reported = 0;
    const double atol = tol->atol + tol->atol_maxabs * t->maxabs;
    if (tol->check_samples) {
        for (size_t i = 0; i < t->n_stored; i++) {
            const size_t j = pdump_index(t, i);
            const double ref = t->data[i], got = x[j], err = fabs(got - ref);
            r.n_checked++;
            if (!(err <= r.max_abs_err)) { /* also catches NaN in x */
                r.max_abs_err = isnan(err) ? INFINITY : err;
                r.worst_index = j;
            }
            if (ref != 0 && err / fabs(ref) > r.max_rel_err) r.max_rel_err = err / fabs(ref);
            if (!(err <= atol + tol->rtol * fabs(ref))) {
                r.n_bad++;
                if (log && reported < tol->max_report) {
                    fprintf(log, "#   %s[%zu]: got %.9g, want %.9g (abs err %.3g)\n", t->name, j,
                            got, ref, err);
                    reported++;
                }
            }
        }
        r.tensor_rel = t->maxabs > 0 ? r.max_abs_err / t->maxabs : 0;
    }
    if (tol->check_stats) {
        double s[4];
        pdump_stats(x, numel, s);
        const double want[4] = { t->l2, t->l1, t->sum, t->maxabs };
        /* sum is judged against the L1 norm: a sum near zero has no relative scale */
        const double scale[4] = { t->l2, t->l1, t->l1, t->maxabs };
        const double slack[4] = { atol * sqrt((double)numel), atol * (double)numel,
                                  atol * (double)numel, atol };
        static const char *const what[4] = { "l2", "l1", "sum", "maxabs" };
        for (int k = 0; k < 4; k++) {
            const double err = fabs(s[k] - want[k]);
            if (!(err <= slack[k] + tol->rtol * scale[k])) {
                r.n_bad_stats++;
                if (log)
                    fprintf(log, "#   %s: %s got %.9g, want %.9g\n", t->name, what[k], s[k],
                            want[k]);
            }
        }
        r.l2_rel_err = t->l2 > 0 ? fabs(s[0] - t->l2) / t->l2 : 0;
    }
    if (log && (r.n_bad || r.n_bad_stats))
        fprintf(log,
                "# %s: %zu of %zu elements and %d statistics out of tolerance (atol %g rtol %g);"
                " max abs err %.3g at %zu, tensor rel err %.3g, l2 rel err %.3g\n",
                t->name, r.n_bad, r.n_checked, r.n_bad_stats, atol, tol->rtol, r.max_abs_err,
                r.worst_index, r.tensor_rel, r.l2_rel_err);
    if (res) *res = r;
    const size_t fails = r.n_bad + (size_t)r.n_bad_stats;
    return fails > INT32_MAX ? INT32_MAX : (int)fails;
}

int pdump_compare_named(const struct pdump *d, const char *name, const float *x, size_t numel,
                        const struct pdump_tol *tol, FILE *log, struct pdump_result *res)
{
    if (!d || !name) return -EINVAL;
    const struct pdump_tensor *t = pdump_find(d, name);
    if (!t) {
        if (log) fprintf(log, "# %s: not in the dump\n", name);
        return -ENOENT;
    }
    return pdump_compare(t, x, numel, tol, log, res);
}

const char *pdump_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case PDUMP_EBADMAGIC:
        return "not a parity dump (bad magic)";
    case PDUMP_EVERSION:
        return "unsupported parity dump version";
    case PDUMP_ETRUNC:
        return "parity dump truncated (or its size field is wrong)";
    case PDUMP_ECORRUPT:
        return "parity dump corrupt (inconsistent entry header)";
    default:
        return rc < 0 ? strerror(-rc) : "unknown";
    }
}
