/*
 * The PyTorch side of export.h: a state dict written as torch.save writes one (zip of stored
 * entries + pickle protocol 2), and the helpers both exporters share (atomic file write, fp16
 * bits, error names).
 *
 * ZIP. Local header, data, ..., central directory, end record; no zip64, no data descriptors
 * (every size and CRC-32 is known before its header is written). As PyTorch's writer does,
 * each local header carries an extra field (id 0x4246 "FB", 'Z' padding) that moves the entry's
 * data to a 64-byte boundary, so a reader may map tensors in place. Times are 1980-01-01 00:00
 * so the same model gives the same bytes.
 *
 * PICKLE. What Python's pickler writes for torch.save(model.state_dict()) minus _metadata:
 *   OrderedDict() then one SETITEMS batch per 1000 entries of
 *     name: _rebuild_tensor_v2((persistent ('storage', torch.XStorage, key, 'cpu', numel)),
 *                              0, size, stride, False, OrderedDict())
 * Only the globals torch.load(weights_only=True) allows are named.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "export.h"
#include "util.h"

#define PT_ARCHIVE    "archive/"
#define PT_ALIGN      64
#define PT_BATCH      1000 /* pickle's SETITEMS batch */
#define ZIP_LIMIT     0xfffffffeull
#define DOS_DATE_1980 0x0021 /* 1980-01-01 */

/* ---------------------------------------------------------------------------------------- */
/* Shared helpers                                                                           */

uint16_t trn_export_f16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    const uint32_t exp = u >> 23 & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | man >> 13 : 0u));
    /* Value = 1.man * 2^(exp-127); fp16 normal exponents are -14..15. */
    const int e = (int)exp - 127;
    if (e > 15) return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        uint32_t h = (uint32_t)(e + 15) << 10 | man >> 13;
        const uint32_t rest = man & 0x1fffu;
        /* Round to nearest even; a carry into the exponent is the right answer (up to inf). */
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25) return sign; /* below half the smallest subnormal: +-0 */
    /* Subnormal: the 24-bit significand shifted so that its unit is 2^-24. */
    const uint32_t sig = man | 0x800000u;
    const int shift = -e - 14 + 13; /* 14..24 */
    uint32_t h = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

int trn_export_write_file(const char *path, const void *buf, size_t len, char *err, size_t err_cap)
{
    if (!path || (!buf && len)) return -EINVAL;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= sizeof tmp)
        return trn_fail(err, err_cap, -ENAMETOOLONG, "%s: path too long", path);
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int e = errno;
        return trn_fail(err, err_cap, -e, "%s: cannot create: %s", path, strerror(e));
    }
    const uint8_t *p = buf;
    size_t left = len;
    int rc = 0;
    while (left > 0) {
        const ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        return trn_fail(err, err_cap, rc, "%s: cannot write: %s", path, strerror(-rc));
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Byte buffer                                                                              */

struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int rc; /* sticky: -ENOMEM after a failed growth, every later put is a no-op */
};

static void put(struct wbuf *b, const void *src, size_t len)
{
    if (b->rc) return;
    if (len > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < len) {
            if (cap > SIZE_MAX / 2) {
                b->rc = -ENOMEM;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->rc = -ENOMEM;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (len) memcpy(b->p + b->n, src, len);
    b->n += len;
}

static void put8(struct wbuf *b, unsigned v)
{
    const uint8_t x = (uint8_t)v;
    put(b, &x, 1);
}

static void put16(struct wbuf *b, unsigned v)
{
    const uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    put(b, x, 2);
}

static void put32(struct wbuf *b, uint32_t v)
{
    const uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    put(b, x, 4);
}

/* ---------------------------------------------------------------------------------------- */
/* Pickle                                                                                   */

enum { MEMO_ODICT, MEMO_REBUILD, MEMO_FLOAT, MEMO_HALF, MEMO_LONG, MEMO_N };

struct pickler {
    struct wbuf b;
    bool memo[MEMO_N];
};

static void pk_int(struct wbuf *b, int64_t v)
{
    if (v >= 0 && v < 256) {
        put8(b, 'K');
        put8(b, (unsigned)v);
    } else if (v >= 0 && v < 65536) {
        put8(b, 'M');
        put16(b, (unsigned)v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        put8(b, 'J');
        put32(b, (uint32_t)(int32_t)v);
    } else {
        put8(b, 0x8a); /* LONG1: little-endian two's complement */
        put8(b, 8);
        for (int i = 0; i < 8; i++)
            put8(b, (unsigned)((uint64_t)v >> (8 * i)) & 0xffu);
    }
}

static void pk_str(struct wbuf *b, const char *s)
{
    const size_t n = strlen(s);
    put8(b, 'X'); /* BINUNICODE */
    put32(b, (uint32_t)n);
    put(b, s, n);
}

/* GLOBAL module\nname\n, memoised: the first use writes it and BINPUTs, later ones BINGET. */
static void pk_global(struct pickler *P, int slot, const char *module, const char *name)
{
    if (P->memo[slot]) {
        put8(&P->b, 'h');
        put8(&P->b, (unsigned)slot);
        return;
    }
    put8(&P->b, 'c');
    put(&P->b, module, strlen(module));
    put8(&P->b, '\n');
    put(&P->b, name, strlen(name));
    put8(&P->b, '\n');
    put8(&P->b, 'q');
    put8(&P->b, (unsigned)slot);
    P->memo[slot] = true;
}

static void pk_tuple_of(struct wbuf *b, const int64_t *v, int n)
{
    if (n == 0) {
        put8(b, ')');
        return;
    }
    put8(b, '(');
    for (int i = 0; i < n; i++)
        pk_int(b, v[i]);
    put8(b, 't');
}

/* Storage type of tensor t when written. */
static int storage_slot(const struct trn_tensor *t, bool half)
{
    return t->arena == TRN_ARENA_COUNT ? MEMO_LONG : half ? MEMO_HALF : MEMO_FLOAT;
}

static void pk_tensor(struct pickler *P, const struct trn_tensor *t, int key, bool half)
{
    struct wbuf *b = &P->b;
    pk_str(b, t->name);
    pk_global(P, MEMO_REBUILD, "torch._utils", "_rebuild_tensor_v2");
    put8(b, '(');
    /* the persistent id tuple */
    put8(b, '(');
    pk_str(b, "storage");
    const int slot = storage_slot(t, half);
    pk_global(P, slot, "torch",
              slot == MEMO_LONG   ? "LongStorage"
              : slot == MEMO_HALF ? "HalfStorage"
                                  : "FloatStorage");
    char k[24];
    snprintf(k, sizeof k, "%d", key);
    pk_str(b, k);
    pk_str(b, "cpu");
    pk_int(b, (int64_t)t->numel);
    put8(b, 't');
    put8(b, 'Q'); /* BINPERSID */
    pk_int(b, 0); /* storage_offset */
    int64_t shape[4], stride[4];
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        shape[d] = t->shape[d];
        stride[d] = s;
        s *= t->shape[d];
    }
    pk_tuple_of(b, shape, t->ndim);
    pk_tuple_of(b, stride, t->ndim);
    put8(b, 0x89); /* NEWFALSE: requires_grad */
    pk_global(P, MEMO_ODICT, "collections", "OrderedDict");
    put8(b, ')');
    put8(b, 'R'); /* backward_hooks = OrderedDict() */
    put8(b, 't');
    put8(b, 'R');
}

static int pickle_state_dict(const struct trn_model *m, bool half, struct wbuf *out)
{
    struct pickler P;
    memset(&P, 0, sizeof P);
    struct wbuf *b = &P.b;
    put8(b, 0x80);
    put8(b, 2);
    pk_global(&P, MEMO_ODICT, "collections", "OrderedDict");
    put8(b, ')');
    put8(b, 'R');
    const int n = trn_model_info(m)->n_tensors;
    for (int i = 0; i < n; i++) {
        if (i % PT_BATCH == 0) put8(b, '(');
        pk_tensor(&P, trn_model_tensor(m, i), i, half);
        if (i % PT_BATCH == PT_BATCH - 1 || i == n - 1) put8(b, 'u');
    }
    put8(b, '.');
    *out = P.b;
    return P.b.rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Zip                                                                                      */

struct zentry {
    char name[64];
    uint32_t crc;
    uint64_t size;
    uint64_t off; /* of the local header */
};

struct zipw {
    struct wbuf b;
    struct zentry *e;
    size_t n, cap;
};

static int zip_add(struct zipw *z, const char *name, const void *data, size_t len)
{
    if (z->b.rc) return z->b.rc;
    if (len > ZIP_LIMIT || z->b.n > ZIP_LIMIT - len - 4096) return -EFBIG;
    if (z->n == z->cap) {
        const size_t cap = z->cap ? 2 * z->cap : 64;
        struct zentry *e = realloc(z->e, cap * sizeof *e);
        if (!e) return -ENOMEM;
        z->e = e;
        z->cap = cap;
    }
    struct zentry *e = &z->e[z->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->crc = (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), data, len);
    e->size = len;
    e->off = z->b.n;
    const size_t nl = strlen(e->name);
    /* 30-byte header + name + extra ("FB", size, 'Z' x pad) puts the data on a 64-byte line */
    const size_t end = z->b.n + 30 + nl + 4;
    const size_t pad = (PT_ALIGN - end % PT_ALIGN) % PT_ALIGN;
    put32(&z->b, 0x04034b50u);
    put16(&z->b, 20); /* version needed: 2.0 */
    put16(&z->b, 0);  /* flags */
    put16(&z->b, 0);  /* stored */
    put16(&z->b, 0);  /* time */
    put16(&z->b, DOS_DATE_1980);
    put32(&z->b, e->crc);
    put32(&z->b, (uint32_t)len);
    put32(&z->b, (uint32_t)len);
    put16(&z->b, (unsigned)nl);
    put16(&z->b, (unsigned)(4 + pad));
    put(&z->b, e->name, nl);
    put16(&z->b, 0x4246u);
    put16(&z->b, (unsigned)pad);
    for (size_t i = 0; i < pad; i++)
        put8(&z->b, 'Z');
    put(&z->b, data, len);
    return z->b.rc;
}

static int zip_finish(struct zipw *z)
{
    const uint64_t cd = z->b.n;
    for (size_t i = 0; i < z->n; i++) {
        const struct zentry *e = &z->e[i];
        const size_t nl = strlen(e->name);
        put32(&z->b, 0x02014b50u);
        put16(&z->b, 20); /* made by */
        put16(&z->b, 20); /* needed */
        put16(&z->b, 0);
        put16(&z->b, 0);
        put16(&z->b, 0);
        put16(&z->b, DOS_DATE_1980);
        put32(&z->b, e->crc);
        put32(&z->b, (uint32_t)e->size);
        put32(&z->b, (uint32_t)e->size);
        put16(&z->b, (unsigned)nl);
        put16(&z->b, 0); /* extra */
        put16(&z->b, 0); /* comment */
        put16(&z->b, 0); /* disk */
        put16(&z->b, 0); /* internal attributes */
        put32(&z->b, 0); /* external attributes */
        put32(&z->b, (uint32_t)e->off);
        put(&z->b, e->name, nl);
    }
    const uint64_t cd_size = z->b.n - cd;
    if (z->n > 0xfffe || z->b.n > ZIP_LIMIT) return -EFBIG;
    put32(&z->b, 0x06054b50u);
    put16(&z->b, 0);
    put16(&z->b, 0);
    put16(&z->b, (unsigned)z->n);
    put16(&z->b, (unsigned)z->n);
    put32(&z->b, (uint32_t)cd_size);
    put32(&z->b, (uint32_t)cd);
    put16(&z->b, 0);
    return z->b.rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The state dict                                                                           */

int trn_export_pt_mem(const struct trn_model *m, bool half, uint8_t **buf, size_t *len, char *err,
                      size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!m || !buf || !len) return -EINVAL;
    const struct trn_model_info *info = trn_model_info(m);
    struct wbuf pkl = { 0 };
    struct zipw z;
    memset(&z, 0, sizeof z);
    void *tmp = NULL;
    int rc = pickle_state_dict(m, half, &pkl);
    if (rc == 0) rc = zip_add(&z, PT_ARCHIVE "data.pkl", pkl.p, pkl.n);
    if (rc == 0) rc = zip_add(&z, PT_ARCHIVE "byteorder", "little", 6);
    /* the largest tensor, for the fp16 conversion buffer */
    size_t most = 0;
    for (int i = 0; i < info->n_tensors; i++)
        if (trn_model_tensor(m, i)->numel > most) most = trn_model_tensor(m, i)->numel;
    if (rc == 0 && half && !(tmp = malloc(most * sizeof(uint16_t)))) rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < info->n_tensors; i++) {
        const struct trn_tensor *t = trn_model_tensor(m, i);
        const void *base = trn_model_arena_const(m, t->arena);
        const void *data;
        size_t bytes;
        if (t->arena == TRN_ARENA_COUNT) {
            data = (const int64_t *)base + t->offset;
            bytes = t->numel * sizeof(int64_t);
        } else if (half) {
            const float *f = (const float *)base + t->offset;
            uint16_t *h = tmp;
            for (size_t j = 0; j < t->numel; j++)
                h[j] = trn_export_f16_bits(f[j]);
            data = h;
            bytes = t->numel * sizeof(uint16_t);
        } else {
            data = (const float *)base + t->offset;
            bytes = t->numel * sizeof(float);
        }
        char name[64];
        snprintf(name, sizeof name, PT_ARCHIVE "data/%d", i);
        rc = zip_add(&z, name, data, bytes);
    }
    if (rc == 0) rc = zip_add(&z, PT_ARCHIVE "version", "3\n", 2);
    if (rc == 0) rc = zip_finish(&z);
    free(tmp);
    free(pkl.p);
    free(z.e);
    if (rc < 0) {
        free(z.b.p);
        return trn_fail(err, err_cap, rc, "state dict of %d tensors: %s", info->n_tensors,
                        rc == -EFBIG ? "over 4 GiB (zip64 is not written)" : strerror(-rc));
    }
    *buf = z.b.p;
    *len = z.b.n;
    return 0;
}

int trn_export_pt(const struct trn_model *m, bool half, const char *path, char *err, size_t err_cap)
{
    if (!path) return -EINVAL;
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[256] = "";
    int rc = trn_export_pt_mem(m, half, &buf, &len, why, sizeof why);
    if (rc < 0) return trn_fail(err, err_cap, rc, "%s: %s", path, why);
    rc = trn_export_write_file(path, buf, len, err, err_cap);
    free(buf);
    return rc;
}
