/*
 * The table of convolution plans and its file (kern_plan.h). No tensors, no gradients.
 *
 * Storage: an array of entries, each with the XXH3 digest of its key for a cheap first compare;
 * lookups are linear. A run plans about 60 shapes x 3 passes once, at setup, against at most a
 * few hundred entries (a committed file holds a few GPUs' worth), so nothing faster is needed,
 * and KERN_PLAN_MAX_ENTRIES bounds the worst case (a hostile file) to milliseconds.
 *
 * The text form of an entry is the one truth: kern_plan_format writes it, kern_plan_parse reads
 * it, and the hash digests it (less src), so the three can never disagree on what a key is.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kern_plan.h"

#define PLAN_MAGIC "# kern conv plans 1"

struct entry {
    struct kern_plan_key k;
    struct kern_plan_val v;
    uint64_t kh; /* key_digest(&k) */
    bool used;   /* got or put since the table was made */
};

struct kern_plan {
    pthread_mutex_t mu;
    struct entry *e;
    int n, cap;
};

static const char *const OPS[] = { "fwd", "data", "filter" };
static const char *const DTYPES[] = { "f32", "bf16", "f16" };
static const char *const LAYOUTS[] = { "nchw", "nhwc" };
static const char *const SRCS[] = { "heur", "tuned" };

const char *kern_plan_op_name(int op)
{
    return op >= 0 && op < 3 ? OPS[op] : "?";
}

void kern_plan_gpu_name(char *dst, const char *name)
{
    size_t i = 0;
    for (; name && name[i] && i + 1 < KERN_PLAN_GPU_LEN; i++) {
        const unsigned char c = (unsigned char)name[i];
        const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        dst[i] = keep ? (char)c : '_';
    }
    dst[i] = '\0';
}

/* The shape rules of kern_conv2d (a positive output), the enums, a gpu name in its own form. */
static bool key_ok(const struct kern_plan_key *k)
{
    const struct kern_conv2d *d = &k->d;
    if (k->op < 0 || k->op > 2 || k->dtype < 0 || k->dtype > 2 || k->layout < 0 || k->layout > 1)
        return false;
    if (k->sms < 1 || k->cudnn < 1 || !memchr(k->gpu, '\0', sizeof(k->gpu)) || !k->gpu[0])
        return false;
    char g[KERN_PLAN_GPU_LEN];
    kern_plan_gpu_name(g, k->gpu);
    if (strcmp(g, k->gpu) != 0) return false;
    if (d->n < 1 || d->c_in < 1 || d->h_in < 1 || d->w_in < 1 || d->c_out < 1 || d->k_h < 1 ||
        d->k_w < 1 || d->stride_h < 1 || d->stride_w < 1 || d->pad_h < 0 || d->pad_w < 0)
        return false;
    const unsigned long long dense = (unsigned long long)d->c_in * d->h_in * d->w_in;
    if (d->x_nstride != 0 && (d->x_nstride <= dense)) return false; /* dense is written as 0 */
    return (long long)d->h_in + 2LL * d->pad_h >= d->k_h &&
           (long long)d->w_in + 2LL * d->pad_w >= d->k_w;
}

static bool val_ok(const struct kern_plan_val *v)
{
    return v->algo >= 0 && v->algo < 64 && v->math >= 0 && v->math < 16 &&
           (v->det == 0 || v->det == 1) && (v->src == 0 || v->src == 1);
}

/* The key fields as the file writes them, without the value: "gpu sms ... layout". */
static int key_text(const struct kern_plan_key *k, char *dst, size_t cap)
{
    const struct kern_conv2d *d = &k->d;
    return snprintf(dst, cap, "%s %d %d %s %d %d %d %d %d %d %d %d %d %d %d %zu %s %s", k->gpu,
                    k->sms, k->cudnn, OPS[k->op], d->n, d->c_in, d->h_in, d->w_in, d->c_out, d->k_h,
                    d->k_w, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->x_nstride,
                    DTYPES[k->dtype], LAYOUTS[k->layout]);
}

static uint64_t key_digest(const struct kern_plan_key *k)
{
    char b[KERN_PLAN_MAX_LINE];
    const int n = key_text(k, b, sizeof(b));
    return XXH3_64bits(b, n > 0 && (size_t)n < sizeof(b) ? (size_t)n : 0);
}

/* A key made comparable: a dense x_nstride written as 0. */
static struct kern_plan_key key_norm(const struct kern_plan_key *k)
{
    struct kern_plan_key c = *k;
    if (c.d.x_nstride == (size_t)c.d.c_in * c.d.h_in * c.d.w_in) c.d.x_nstride = 0;
    return c;
}

static bool key_eq(const struct kern_plan_key *a, const struct kern_plan_key *b)
{
    const struct kern_conv2d *x = &a->d, *y = &b->d;
    return strcmp(a->gpu, b->gpu) == 0 && a->sms == b->sms && a->cudnn == b->cudnn &&
           a->op == b->op && a->dtype == b->dtype && a->layout == b->layout && x->n == y->n &&
           x->c_in == y->c_in && x->h_in == y->h_in && x->w_in == y->w_in && x->c_out == y->c_out &&
           x->k_h == y->k_h && x->k_w == y->k_w && x->stride_h == y->stride_h &&
           x->stride_w == y->stride_w && x->pad_h == y->pad_h && x->pad_w == y->pad_w &&
           x->x_nstride == y->x_nstride;
}

int kern_plan_create(struct kern_plan **out)
{
    if (!out) return -EINVAL;
    *out = NULL;
    struct kern_plan *t = calloc(1, sizeof(*t));
    if (!t) return -ENOMEM;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

void kern_plan_destroy(struct kern_plan *t)
{
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->e);
    free(t);
}

int kern_plan_count(struct kern_plan *t)
{
    if (!t) return -EINVAL;
    pthread_mutex_lock(&t->mu);
    const int n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* Index of key k (normalised) in t, or -1. Caller holds the mutex. */
static int find_locked(const struct kern_plan *t, const struct kern_plan_key *k, uint64_t kh)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].kh == kh && key_eq(&t->e[i].k, k)) return i;
    return -1;
}

int kern_plan_get(struct kern_plan *t, const struct kern_plan_key *k, struct kern_plan_val *v)
{
    if (!t || !k || !v) return -EINVAL;
    const struct kern_plan_key c = key_norm(k);
    if (!key_ok(&c)) return -EINVAL;
    const uint64_t kh = key_digest(&c);
    pthread_mutex_lock(&t->mu);
    const int i = find_locked(t, &c, kh);
    if (i >= 0) {
        *v = t->e[i].v;
        t->e[i].used = true;
    }
    pthread_mutex_unlock(&t->mu);
    return i >= 0 ? 0 : -ENOENT;
}

/* Room for one more entry. Caller holds the mutex. */
static int grow_locked(struct kern_plan *t, int more)
{
    if (t->n + more > KERN_PLAN_MAX_ENTRIES) return -E2BIG;
    if (t->n + more <= t->cap) return 0;
    int cap = t->cap ? t->cap : 64;
    while (cap < t->n + more)
        cap *= 2;
    if (cap > KERN_PLAN_MAX_ENTRIES) cap = KERN_PLAN_MAX_ENTRIES;
    struct entry *e = realloc(t->e, (size_t)cap * sizeof(*e));
    if (!e) return -ENOMEM;
    t->e = e;
    t->cap = cap;
    return 0;
}

int kern_plan_put(struct kern_plan *t, const struct kern_plan_key *k, const struct kern_plan_val *v)
{
    if (!t || !k || !v) return -EINVAL;
    const struct kern_plan_key c = key_norm(k);
    if (!key_ok(&c) || !val_ok(v)) return -EINVAL;
    const uint64_t kh = key_digest(&c);
    pthread_mutex_lock(&t->mu);
    int rc = 0, i = find_locked(t, &c, kh);
    if (i < 0 && (rc = grow_locked(t, 1)) == 0) {
        i = t->n++;
        t->e[i].k = c;
        t->e[i].kh = kh;
    }
    if (rc == 0) {
        t->e[i].v = *v;
        t->e[i].used = true;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* ---- the file ------------------------------------------------------------------------------ */

static int word_index(const char *w, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(w, names[i]) == 0) return i;
    return -1;
}

/* A decimal in [lo, hi] (no sign, no spaces, no leading zeros but "0"), or false. */
static bool num(const char *w, unsigned long long lo, unsigned long long hi,
                unsigned long long *out)
{
    if (!*w || (w[0] == '0' && w[1]) || strlen(w) > 20) return false;
    unsigned long long x = 0;
    for (const char *p = w; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        const unsigned d = (unsigned)(*p - '0');
        if (x > (ULLONG_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    if (x < lo || x > hi) return false;
    *out = x;
    return true;
}

#define NFIELDS 22

/* One entry line (no '\n', '\0'-terminated, in a writable buffer) into *e. Returns NULL or why. */
static const char *parse_line(char *s, struct entry *e)
{
    char *f[NFIELDS + 1];
    int n = 0;
    if (strpbrk(s, "\t\r")) return "a tab or carriage return (fields are split by spaces)";
    for (char *p = s; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        if (n == NFIELDS + 1) break;
        f[n++] = p;
        while (*p && *p != ' ')
            p++;
        if (*p) *p++ = '\0';
    }
    if (n != NFIELDS)
        return "not 22 fields (gpu sms cudnn op n c h w c_out k_h k_w s_h s_w p_h "
               "p_w x_nstride dtype layout algo math det src)";
    memset(e, 0, sizeof(*e));
    struct kern_plan_key *k = &e->k;
    if (strlen(f[0]) >= KERN_PLAN_GPU_LEN) return "gpu name longer than 63 bytes";
    memcpy(k->gpu, f[0], strlen(f[0]) + 1);
    char g[KERN_PLAN_GPU_LEN];
    kern_plan_gpu_name(g, k->gpu);
    if (strcmp(g, k->gpu) != 0) return "gpu name with a byte outside [A-Za-z0-9._-]";
    unsigned long long x[NFIELDS];
    static const unsigned long long lim = INT_MAX;
    for (int i = 1; i <= 15; i++) {
        if (i == 3) continue;
        const unsigned long long lo = i >= 13 ? 0 : 1; /* pads and x_nstride may be 0 */
        if (!num(f[i], lo, i == 15 ? (unsigned long long)SIZE_MAX : lim, &x[i]))
            return "a number out of range or not a plain decimal";
    }
    if ((k->op = word_index(f[3], OPS, 3)) < 0) return "op is not fwd, data or filter";
    if ((k->dtype = word_index(f[16], DTYPES, 3)) < 0) return "dtype is not f32, bf16 or f16";
    if ((k->layout = word_index(f[17], LAYOUTS, 2)) < 0) return "layout is not nchw or nhwc";
    k->sms = (int)x[1], k->cudnn = (int)x[2];
    struct kern_conv2d *d = &k->d;
    d->n = (int)x[4], d->c_in = (int)x[5], d->h_in = (int)x[6], d->w_in = (int)x[7];
    d->c_out = (int)x[8], d->k_h = (int)x[9], d->k_w = (int)x[10];
    d->stride_h = (int)x[11], d->stride_w = (int)x[12], d->pad_h = (int)x[13];
    d->pad_w = (int)x[14], d->x_nstride = (size_t)x[15];
    if (!key_ok(k)) return "not a convolution (kern_conv2d's rules; x_nstride 0 when dense)";
    unsigned long long a, m, det;
    if (!num(f[18], 0, 63, &a) || !num(f[19], 0, 15, &m) || !num(f[20], 0, 1, &det))
        return "algo (0..63), math (0..15) or det (0, 1) out of range";
    e->v.algo = (int)a, e->v.math = (int)m, e->v.det = (int)det;
    if ((e->v.src = word_index(f[21], SRCS, 2)) < 0) return "src is not heur or tuned";
    e->kh = key_digest(k);
    return NULL;
}

int kern_plan_parse(struct kern_plan *t, const char *text, size_t len, const char *name, char *err,
                    size_t err_cap)
{
    if (!t || (!text && len)) return -EINVAL;
    if (!name) name = "(plan text)";
    if (err && err_cap) err[0] = '\0';
#define FAIL(rc, ...)                                            \
    do {                                                         \
        if (err && err_cap) snprintf(err, err_cap, __VA_ARGS__); \
        ret = (rc);                                              \
        goto out;                                                \
    } while (0)
    int ret = 0, added = 0;
    struct entry *got = NULL;
    int ngot = 0, capgot = 0;
    char line[KERN_PLAN_MAX_LINE + 1];
    if (len > KERN_PLAN_MAX_BYTES)
        FAIL(-EFBIG, "%s: %zu bytes, over the %u a plan file may have", name, len,
             KERN_PLAN_MAX_BYTES);
    size_t pos = 0;
    for (long ln = 1; pos < len; ln++) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        const size_t l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        if (l > KERN_PLAN_MAX_LINE)
            FAIL(-EINVAL, "%s:%ld: a line of %zu bytes (at most %d)", name, ln, l,
                 KERN_PLAN_MAX_LINE);
        if (memchr(text + pos, '\0', l)) FAIL(-EINVAL, "%s:%ld: a NUL byte", name, ln);
        memcpy(line, text + pos, l);
        line[l] = '\0';
        pos += l + (nl ? 1 : 0);
        if (ln == 1) {
            if (strcmp(line, PLAN_MAGIC) != 0)
                FAIL(-EINVAL, "%s:1: not a plan file (the first line must be \"%s\")", name,
                     PLAN_MAGIC);
            continue;
        }
        size_t sp = strspn(line, " ");
        if (line[sp] == '\0' || line[sp] == '#') continue;
        if (ngot == capgot) {
            if (t->n + ngot >= KERN_PLAN_MAX_ENTRIES)
                FAIL(-E2BIG, "%s:%ld: more than %d entries", name, ln, KERN_PLAN_MAX_ENTRIES);
            capgot = capgot ? 2 * capgot : 64;
            struct entry *g = realloc(got, (size_t)capgot * sizeof(*g));
            if (!g) FAIL(-ENOMEM, "%s: out of memory", name);
            got = g;
        }
        const char *why = parse_line(line, &got[ngot]);
        if (why) FAIL(-EINVAL, "%s:%ld: %s", name, ln, why);
        for (int i = 0; i < ngot; i++)
            if (got[i].kh == got[ngot].kh && key_eq(&got[i].k, &got[ngot].k))
                FAIL(-EEXIST, "%s:%ld: the key of an earlier line again", name, ln);
        got[ngot].used = false;
        ngot++;
    }
    if (len == 0) FAIL(-EINVAL, "%s: empty (not a plan file)", name);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < ngot; i++)
        if (find_locked(t, &got[i].k, got[i].kh) >= 0) {
            pthread_mutex_unlock(&t->mu);
            FAIL(-EEXIST, "%s: an entry the table already holds", name);
        }
    ret = grow_locked(t, ngot);
    if (ret == 0 && ngot > 0) { /* a file of comments only leaves both arrays NULL */
        memcpy(t->e + t->n, got, (size_t)ngot * sizeof(*got));
        t->n += ngot;
        added = ngot;
    }
    pthread_mutex_unlock(&t->mu);
    if (ret < 0) FAIL(ret, "%s: %d entries do not fit the table", name, ngot);
out:
#undef FAIL
    free(got);
    return ret < 0 ? ret : added;
}

int kern_plan_load(struct kern_plan *t, const char *path, char *err, size_t err_cap)
{
    if (!t || !path) return -EINVAL;
    /* O_NONBLOCK: a FIFO must be refused, not waited on */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        if (err && err_cap) snprintf(err, err_cap, "%s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        if (err && err_cap) snprintf(err, err_cap, "%s: %s", path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        if (err && err_cap) snprintf(err, err_cap, "%s: not a regular file", path);
    } else if ((unsigned long long)st.st_size > KERN_PLAN_MAX_BYTES) {
        rc = -EFBIG;
        if (err && err_cap)
            snprintf(err, err_cap, "%s: %lld bytes, over the %u a plan file may have", path,
                     (long long)st.st_size, KERN_PLAN_MAX_BYTES);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = -ENOMEM;
    } else {
        /* read to EOF, never past the bound: the file may grow under us */
        size_t got = 0;
        for (;;) {
            const ssize_t r = read(fd, buf + got, (size_t)st.st_size + 1 - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = -errno;
                if (err && err_cap) snprintf(err, err_cap, "%s: %s", path, strerror(-rc));
                break;
            }
            if (r == 0) break;
            got += (size_t)r;
            if (got > (size_t)st.st_size) {
                rc = -EAGAIN;
                if (err && err_cap) snprintf(err, err_cap, "%s: changed while read", path);
                break;
            }
        }
        if (rc == 0) rc = kern_plan_parse(t, buf, got, path, err, err_cap);
    }
    free(buf);
    close(fd);
    return rc;
}

/* Orders entries by their text, so that saved files and the hash do not depend on the order of
 * insertion. */
struct line {
    char s[KERN_PLAN_MAX_LINE];
};

static int line_cmp(const void *a, const void *b)
{
    return strcmp(((const struct line *)a)->s, ((const struct line *)b)->s);
}

/* The sorted lines of t's entries (used_only: the used ones), with src when with_src; *n lines.
 * Caller frees. Returns NULL only on ENOMEM with *n > 0. Takes the mutex. */
static struct line *sorted_lines(struct kern_plan *t, int used_only, bool with_src, int *n)
{
    pthread_mutex_lock(&t->mu);
    struct line *l = malloc((size_t)(t->n ? t->n : 1) * sizeof(*l));
    int m = 0;
    for (int i = 0; l && i < t->n; i++) {
        const struct entry *e = &t->e[i];
        if (used_only && !e->used) continue;
        const int kn = key_text(&e->k, l[m].s, sizeof(l[m].s));
        snprintf(l[m].s + kn, sizeof(l[m].s) - (size_t)kn, " %d %d %d%s%s", e->v.algo, e->v.math,
                 e->v.det, with_src ? " " : "", with_src ? SRCS[e->v.src] : "");
        m++;
    }
    pthread_mutex_unlock(&t->mu);
    if (l) qsort(l, (size_t)m, sizeof(*l), line_cmp);
    *n = l ? m : 1;
    return l;
}

int kern_plan_format(struct kern_plan *t, int used_only, char *dst, size_t dst_cap)
{
    if (!t || (!dst && dst_cap)) return -EINVAL;
    int n;
    struct line *l = sorted_lines(t, used_only, true, &n);
    if (!l) return -ENOMEM;
    static const char head[] =
        PLAN_MAGIC "\n# gpu sms cudnn op n c_in h w c_out k_h k_w s_h s_w p_h p_w x_nstride dtype "
                   "layout algo math det src\n";
    /* total: the whole text's bytes; put: those written, whole lines only, so that a short dst
     * holds a '\0'-terminated prefix and never a byte left unwritten */
    const size_t hl = sizeof(head) - 1;
    size_t total = hl, put = 0;
    if (dst_cap > hl) memcpy(dst, head, hl), put = hl;
    for (int i = 0; i < n; i++) {
        const size_t ll = strlen(l[i].s);
        if (put == total && total + ll + 1 < dst_cap) {
            memcpy(dst + total, l[i].s, ll);
            dst[total + ll] = '\n';
            put += ll + 1;
        }
        total += ll + 1;
    }
    if (dst_cap) dst[put] = '\0';
    free(l);
    return total > INT_MAX ? -EOVERFLOW : (int)total;
}

int kern_plan_save(struct kern_plan *t, const char *path, int used_only, char *err, size_t err_cap)
{
    if (!t || !path) return -EINVAL;
    const int need = kern_plan_format(t, used_only, NULL, 0);
    if (need < 0) return need;
    char *buf = malloc((size_t)need + 1);
    if (!buf) return -ENOMEM;
    kern_plan_format(t, used_only, buf, (size_t)need + 1);
    char tmp[4096];
    int rc = 0;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        free(buf);
        if (err && err_cap) snprintf(err, err_cap, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *what = "open";
    if (fd < 0) {
        rc = -errno;
    } else {
        size_t off = 0;
        while (off < (size_t)need) {
            const ssize_t w = write(fd, buf + off, (size_t)need - off);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                rc = -errno, what = "write";
                break;
            }
            off += (size_t)w;
        }
        if (rc == 0 && fsync(fd) != 0) rc = -errno, what = "fsync";
        if (close(fd) != 0 && rc == 0) rc = -errno, what = "close";
        if (rc == 0 && rename(tmp, path) != 0) rc = -errno, what = "rename";
        if (rc < 0) unlink(tmp);
    }
    if (rc < 0 && err && err_cap)
        snprintf(err, err_cap, "%s: %s: %s", fd < 0 ? tmp : path, what, strerror(-rc));
    free(buf);
    return rc;
}

uint64_t kern_plan_hash(struct kern_plan *t)
{
    if (!t) return 0;
    int n;
    struct line *l = sorted_lines(t, 1, false, &n);
    if (!l || n == 0) {
        free(l);
        return 0;
    }
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < n; i++) {
        XXH3_64bits_update(&st, l[i].s, strlen(l[i].s));
        XXH3_64bits_update(&st, "\n", 1);
    }
    free(l);
    return XXH3_64bits_digest(&st);
}

/* ---- the choice ---------------------------------------------------------------------------- */

int kern_plan_pick(const struct kern_plan_cand *c, int n, int any_algo, size_t ws_cap)
{
    if (!c || n < 0) return -1;
    for (int pass = any_algo ? 1 : 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (c[i].ok && c[i].math_ok && c[i].memory <= ws_cap && (pass == 1 || c[i].det))
                return i;
    return -1;
}

/* Ask the backend's heuristics (or, find, its timed search) and pick; *v and *ws on success.
 * The pick is confirmed by the backend's check, whose workspace size is the one used (a ranked
 * list's sizes are estimates); a pick it refuses is struck and the next taken. Returns 0,
 * -ENOTSUP or the backend's error. */
static int ask(const struct kern_plan_backend *b, bool find, int op, int any_algo, size_t ws_cap,
               struct kern_plan_val *v, size_t *ws)
{
    struct kern_plan_cand c[KERN_PLAN_MAX_CANDS];
    const int got = (find ? b->find : b->heur)(b->arg, op, c, KERN_PLAN_MAX_CANDS);
    if (got < 0) return got;
    const int n = got < KERN_PLAN_MAX_CANDS ? got : KERN_PLAN_MAX_CANDS;
    for (;;) {
        const int i = kern_plan_pick(c, n, any_algo, ws_cap);
        if (i < 0) return -ENOTSUP;
        v->algo = c[i].algo, v->math = c[i].math, v->det = c[i].det ? 1 : 0;
        v->src = find ? KERN_PLAN_SRC_TUNED : KERN_PLAN_SRC_HEUR;
        size_t w = 0;
        if (b->check(b->arg, op, v, &w) == 0 && w <= ws_cap) {
            *ws = w;
            return 0;
        }
        c[i].ok = 0;
    }
}

int kern_plan_choose(struct kern_plan *t, const struct kern_plan_key *k, int any_algo, int tune,
                     size_t ws_cap, const struct kern_plan_backend *b, struct kern_plan_val *v,
                     size_t *ws, int *how)
{
    if (!k || !b || !b->check || !b->heur || !b->find || !v || !ws || !how) return -EINVAL;
    struct kern_plan_val got;
    size_t w = 0;
    if (t && kern_plan_get(t, k, &got) == 0 && (any_algo || got.det) &&
        b->check(b->arg, k->op, &got, &w) == 0 && w <= ws_cap) {
        *v = got, *ws = w, *how = KERN_PLAN_HOW_TABLE;
        return 0;
    }
    int rc;
    if (tune) {
        rc = ask(b, true, k->op, any_algo, ws_cap, v, ws);
        *how = KERN_PLAN_HOW_FIND;
    } else {
        rc = ask(b, false, k->op, any_algo, ws_cap, v, ws);
        *how = KERN_PLAN_HOW_HEUR;
        if (rc == -ENOTSUP) { /* nothing ranked fits: a timed search is the last resort */
            rc = ask(b, true, k->op, any_algo, ws_cap, v, ws);
            *how = KERN_PLAN_HOW_FIND;
        }
    }
    if (rc < 0) return rc;
    if (t) {
        const int pr = kern_plan_put(t, k, v);
        if (pr < 0 && pr != -E2BIG) return pr; /* a full table still runs, unrecorded */
    }
    return 0;
}
