/*
 * The .pt reader's front: opening (file -> zip -> pickle), the state-dict walk over module
 * placeholders, element conversion, and the model yaml. See ptload.h for the format.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "priv/pt_internal.h"

int pt_fail(struct trn_pt *pt, int rc, const char *fmt, ...)
{
    if (pt->err && pt->err_cap) {
        const int n = snprintf(pt->err, pt->err_cap, "%s: ", pt->file_name);
        if (n >= 0 && (size_t)n < pt->err_cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(pt->err + n, pt->err_cap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

size_t trn_pt_dtype_size(enum trn_pt_dtype d)
{
    switch (d) {
    case TRN_PT_F16:
    case TRN_PT_BF16:
    case TRN_PT_I16:
        return 2;
    case TRN_PT_F32:
    case TRN_PT_I32:
        return 4;
    case TRN_PT_F64:
    case TRN_PT_I64:
        return 8;
    case TRN_PT_I8:
    case TRN_PT_U8:
    case TRN_PT_BOOL:
        return 1;
    }
    return 1;
}

const char *trn_pt_dtype_name(enum trn_pt_dtype d)
{
    static const char *const names[] = { "f16", "bf16", "f32", "f64", "i64",
                                         "i32", "i16",  "i8",  "u8",  "bool" };
    return (unsigned)d < sizeof names / sizeof names[0] ? names[d] : "?";
}

float trn_pt_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13; /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) {
        bits = sign;
    } else {
        /* Subnormal: man * 2^-24, exact in float. */
        const float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                  */

static void pt_free(struct trn_pt *pt)
{
    for (size_t i = 0; i < pt->n_entries; i++) {
        free(pt->entries[i].name);
        free(pt->entries[i].owned);
    }
    free(pt->entries);
    for (uint32_t i = 0; i < pt->n_objs; i++)
        free(pt->objs[i].items);
    free(pt->objs);
    free(pt->storages);
    free(pt->tensors);
    for (uint32_t i = 0; i < pt->n_strings; i++)
        free(pt->strings[i]);
    free(pt->strings);
    for (int i = 0; i < pt->n_sd; i++)
        free(pt->sd_names[i]);
    free(pt->sd_names);
    free(pt->sd);
    free(pt->sd_raw);
    free(pt->file);
    free(pt);
}

void trn_pt_close(struct trn_pt *pt)
{
    if (pt) pt_free(pt);
}

/* Parse the archive and run data.pkl; pt->file is set. */
static int pt_load(struct trn_pt *pt)
{
    int rc = pt_zip_parse(pt);
    if (rc) return rc;
    /* data.pkl sits in the archive's one top folder, whose name varies ("archive", the stem). */
    struct pt_entry *pkl = NULL;
    for (size_t i = 0; i < pt->n_entries; i++) {
        const char *nm = pt->entries[i].name, *slash = strchr(nm, '/');
        if (slash && strcmp(slash, "/data.pkl") == 0) {
            if (pkl) return pt_fail(pt, -TRN_PT_EZIP, "two data.pkl entries");
            pkl = &pt->entries[i];
        }
    }
    if (!pkl) {
        if (pt->n_entries && pt->entries[0].name[0])
            return pt_fail(pt, -TRN_PT_ESTRUCT,
                           "no <dir>/data.pkl entry: not a torch.save "
                           "zip checkpoint");
        return pt_fail(pt, -TRN_PT_ESTRUCT, "no data.pkl entry");
    }
    const size_t plen = (size_t)(strchr(pkl->name, '/') - pkl->name) + 1;
    if (plen >= sizeof pt->prefix)
        return pt_fail(pt, -TRN_PT_ELIMIT, "archive folder name too long");
    memcpy(pt->prefix, pkl->name, plen);
    pt->prefix[plen] = '\0';
    pt->pkl_entry = pkl->name;
    struct pt_entry *bo = NULL;
    char name[sizeof pt->prefix + 16];
    snprintf(name, sizeof name, "%sbyteorder", pt->prefix);
    if ((bo = pt_zip_find(pt, name)) != NULL) {
        const uint8_t *b;
        if ((rc = pt_zip_get(pt, bo, 64, &b))) return rc;
        if (!(bo->usize == 6 && memcmp(b, "little", 6) == 0))
            return pt_fail(pt, -TRN_PT_EUNSUPPORTED, "%s: only little-endian storages", name);
    }
    const uint8_t *p;
    if ((rc = pt_zip_get(pt, pkl, TRN_PT_MAX_PICKLE, &p))) return rc;
    return pt_pickle_run(pt, p, (size_t)pkl->usize);
}

static struct trn_pt *pt_new(const char *name, char *err, size_t err_cap)
{
    struct trn_pt *pt = calloc(1, sizeof *pt);
    if (!pt) return NULL;
    const char *base = strrchr(name, '/');
    snprintf(pt->file_name, sizeof pt->file_name, "%s", base ? base + 1 : name);
    pt->err = err;
    pt->err_cap = err_cap;
    pt->root = -1;
    pt->inflate_budget = TRN_PT_INFLATE_BUDGET;
    return pt;
}

static int pt_finish(struct trn_pt *pt, int rc, struct trn_pt **out)
{
    if (rc) {
        pt_free(pt);
        return rc;
    }
    pt->err = NULL;
    pt->err_cap = 0;
    *out = pt;
    return 0;
}

int trn_pt_open_mem(const void *data, size_t len, const char *name, struct trn_pt **out, char *err,
                    size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if ((!data && len) || !name || !out) return -EINVAL;
    struct trn_pt *pt = pt_new(name, err, err_cap);
    if (!pt) return -ENOMEM;
    if ((uint64_t)len > (uint64_t)TRN_PT_MAX_FILE)
        return pt_finish(pt, pt_fail(pt, -EFBIG, "larger than %lld bytes", TRN_PT_MAX_FILE), out);
    pt->file = malloc(len ? len : 1);
    if (!pt->file) return pt_finish(pt, pt_fail(pt, -ENOMEM, "out of memory"), out);
    if (len) memcpy(pt->file, data, len);
    pt->file_len = len;
    return pt_finish(pt, pt_load(pt), out);
}

int trn_pt_open(const char *path, struct trn_pt **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!path || !out) return -EINVAL;
    struct trn_pt *pt = pt_new(path, err, err_cap);
    if (!pt) return -ENOMEM;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pt_finish(pt, pt_fail(pt, -errno, "cannot open: %s", strerror(errno)), out);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = pt_fail(pt, -errno, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = pt_fail(pt, -EINVAL, "not a regular file");
    } else if (st.st_size > TRN_PT_MAX_FILE) {
        rc = pt_fail(pt, -EFBIG, "larger than %lld bytes", TRN_PT_MAX_FILE);
    } else {
        pt->file_len = (size_t)st.st_size;
        pt->file = malloc(pt->file_len ? pt->file_len : 1);
        if (!pt->file) rc = pt_fail(pt, -ENOMEM, "out of memory");
        for (size_t got = 0; !rc && got < pt->file_len;) {
            const ssize_t r = read(fd, pt->file + got, pt->file_len - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0)
                rc = pt_fail(pt, -errno, "read: %s", strerror(errno));
            else if (r == 0)
                rc = pt_fail(pt, -EIO, "file shrank while reading");
            else
                got += (size_t)r;
        }
    }
    close(fd);
    if (rc) return pt_finish(pt, rc, out);
    return pt_finish(pt, pt_load(pt), out);
}

/* ---------------------------------------------------------------------------------------- */
/* Object tree helpers                                                                      */

bool pt_str_eq(const struct trn_pt *pt, int32_t o, const char *s)
{
    if (o < 0) return false;
    const struct pt_obj *x = &pt->objs[o];
    const size_t n = strlen(s);
    return x->kind == PT_STR && x->len == n && memcmp(x->s, s, n) == 0;
}

int32_t pt_dict_get(const struct trn_pt *pt, int32_t d, const char *key)
{
    if (d < 0) return -1;
    const struct pt_obj *o = &pt->objs[d];
    if (o->kind != PT_DICT && !(o->kind == PT_OBJ && o->dictlike)) return -1;
    int32_t found = -1;
    for (uint32_t i = 0; i + 1 < o->n; i += 2)
        if (pt_str_eq(pt, o->items[i], key)) found = o->items[i + 1];
    return found;
}

int32_t pt_obj_state(const struct trn_pt *pt, int32_t o)
{
    if (o < 0 || pt->objs[o].kind != PT_OBJ) return -1;
    int32_t s = pt->objs[o].c;
    /* (state, slotstate) tuples: the dict is the first item. */
    if (s >= 0 && pt->objs[s].kind == PT_TUPLE && pt->objs[s].n == 2) s = pt->objs[s].items[0];
    return s >= 0 && pt->objs[s].kind == PT_DICT ? s : -1;
}

const char *trn_pt_default_key(const struct trn_pt *pt)
{
    if (!pt || pt->root < 0 || pt->objs[pt->root].kind != PT_DICT) return NULL;
    const int32_t ema = pt_dict_get(pt, pt->root, "ema");
    if (ema >= 0 && pt->objs[ema].kind != PT_NONE) return "ema";
    if (pt_dict_get(pt, pt->root, "model") >= 0) return "model";
    /* no checkpoint keys: a plain state dict (yolo-export --include pt, torch.save(sd)) */
    return "";
}

int32_t pt_resolve(const struct trn_pt *pt, const char *which)
{
    if (!which) which = trn_pt_default_key(pt);
    if (!which || !which[0]) return pt->root;
    const int32_t v = pt_dict_get(pt, pt->root, which);
    if (v < 0) return -TRN_PT_ESTRUCT;
    return v;
}

static void describe(const struct trn_pt *pt, int32_t o, char *dst, size_t cap)
{
    const struct pt_obj *x = &pt->objs[o];
    switch (x->kind) {
    case PT_NONE:
        snprintf(dst, cap, "None");
        break;
    case PT_BOOL:
        snprintf(dst, cap, "bool %s", x->i ? "True" : "False");
        break;
    case PT_INT:
        snprintf(dst, cap, "int %" PRId64, x->i);
        break;
    case PT_FLOAT:
        snprintf(dst, cap, "float %.17g", x->f);
        break;
    case PT_STR:
        snprintf(dst, cap, "str '%.*s'", (int)(x->len > 40 ? 40 : x->len), x->s);
        break;
    case PT_TUPLE:
        snprintf(dst, cap, "tuple(%u)", x->n);
        break;
    case PT_LIST:
        snprintf(dst, cap, "list(%u)", x->n);
        break;
    case PT_DICT:
        snprintf(dst, cap, "dict(%u)", x->n / 2);
        break;
    case PT_GLOBAL:
        snprintf(dst, cap, "class %s", x->s);
        break;
    case PT_OBJ:
        snprintf(dst, cap, "%s",
                 x->a >= 0 && pt->objs[x->a].kind == PT_GLOBAL ? pt->objs[x->a].s : "object");
        break;
    case PT_STORAGE:
        snprintf(dst, cap, "storage");
        break;
    case PT_TENSOR:
        snprintf(dst, cap, "tensor");
        break;
    default:
        snprintf(dst, cap, "?");
        break;
    }
}

int trn_pt_top_key(const struct trn_pt *pt, int i, const char **key, const char **desc)
{
    static _Thread_local char kbuf[128], dbuf[128];
    if (!pt || pt->root < 0 || pt->objs[pt->root].kind != PT_DICT) return -TRN_PT_ESTRUCT;
    const struct pt_obj *d = &pt->objs[pt->root];
    const int n = (int)(d->n / 2);
    if (i < 0 || i >= n) return n;
    const struct pt_obj *k = &pt->objs[d->items[2 * i]];
    if (k->kind == PT_STR)
        snprintf(kbuf, sizeof kbuf, "%.*s", (int)(k->len > 100 ? 100 : k->len), k->s);
    else
        describe(pt, d->items[2 * i], kbuf, sizeof kbuf);
    describe(pt, d->items[2 * i + 1], dbuf, sizeof dbuf);
    if (key) *key = kbuf;
    if (desc) *desc = dbuf;
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* State dict                                                                               */

static int sd_add(struct trn_pt *pt, const char *name, int32_t tobj, bool param)
{
    if (pt->n_sd == pt->cap_sd) {
        const int nc = pt->cap_sd ? pt->cap_sd * 2 : 256;
        struct trn_pt_tensor *s = realloc(pt->sd, (size_t)nc * sizeof *s);
        if (!s) return pt_fail(pt, -ENOMEM, "out of memory");
        pt->sd = s;
        int32_t *r = realloc(pt->sd_raw, (size_t)nc * sizeof *r);
        if (!r) return pt_fail(pt, -ENOMEM, "out of memory");
        pt->sd_raw = r;
        char **nm = realloc(pt->sd_names, (size_t)nc * sizeof *nm);
        if (!nm) return pt_fail(pt, -ENOMEM, "out of memory");
        pt->sd_names = nm;
        pt->cap_sd = nc;
    }
    char *copy = strdup(name);
    if (!copy) return pt_fail(pt, -ENOMEM, "out of memory");
    const struct pt_tensor_raw *r = &pt->tensors[pt->objs[tobj].i];
    const struct pt_storage *s = &pt->storages[r->storage];
    struct trn_pt_tensor *t = &pt->sd[pt->n_sd];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->dtype = s->dtype;
    t->ndim = r->ndim;
    t->numel = 1;
    t->contiguous = true;
    int64_t expect = 1;
    for (int i = r->ndim; i-- > 0;) {
        t->shape[i] = r->shape[i];
        t->stride[i] = r->stride[i];
        if (r->shape[i] != 1 && r->stride[i] != expect) t->contiguous = false;
        expect *= r->shape[i];
    }
    for (int i = 0; i < r->ndim; i++)
        t->numel *= r->shape[i];
    t->offset = r->offset;
    t->storage_key = s->entry->name + strlen(pt->prefix) + 5;
    t->storage_numel = s->numel;
    t->parameter = param;
    pt->sd_names[pt->n_sd] = copy;
    pt->sd_raw[pt->n_sd] = (int32_t)pt->objs[tobj].i;
    pt->n_sd++;
    /* No bytes yet: a storage is checked (CRC) and, deflated, inflated when a view of it is
     * read, and then only as far as the view reaches, so a tensor nobody reads costs nothing. */
    return 0;
}

static int join(struct trn_pt *pt, char *dst, const char *prefix, int32_t key)
{
    const struct pt_obj *k = &pt->objs[key];
    if (k->kind != PT_STR) return pt_fail(pt, -TRN_PT_ESTRUCT, "%s: a non-string key", prefix);
    const size_t pl = strlen(prefix);
    if (pl + k->len + 2 > TRN_PT_MAX_NAME || memchr(k->s, '\0', k->len))
        return pt_fail(pt, -TRN_PT_ELIMIT, "state-dict name %s... too long", prefix);
    memcpy(dst, prefix, pl);
    memcpy(dst + pl, k->s, k->len);
    dst[pl + k->len] = '\0';
    return 0;
}

static bool in_set(const struct trn_pt *pt, int32_t set, int32_t key)
{
    /* builtins.set([...]) is a placeholder whose args hold the list; EMPTY_SET is a list. */
    if (set < 0) return false;
    int32_t l = set;
    if (pt->objs[set].kind == PT_OBJ) {
        const int32_t args = pt->objs[set].b;
        if (args < 0 || pt->objs[args].n < 1) return false;
        l = pt->objs[args].items[0];
    }
    if (pt->objs[l].kind != PT_LIST && pt->objs[l].kind != PT_TUPLE) return false;
    const struct pt_obj *k = &pt->objs[key];
    for (uint32_t i = 0; i < pt->objs[l].n; i++) {
        const struct pt_obj *x = &pt->objs[pt->objs[l].items[i]];
        if (x->kind == PT_STR && x->len == k->len && memcmp(x->s, k->s, k->len) == 0) return true;
    }
    return false;
}

static int walk(struct trn_pt *pt, int32_t o, const char *prefix, int depth);

/* A module's _parameters or _buffers dict. */
static int walk_tensors(struct trn_pt *pt, int32_t d, const char *prefix, bool param,
                        int32_t skip_set)
{
    if (d < 0) return 0;
    if (pt->objs[d].kind != PT_DICT)
        return pt_fail(pt, -TRN_PT_ESTRUCT, "%s: %s is not a dict", prefix[0] ? prefix : "(root)",
                       param ? "_parameters" : "_buffers");
    char name[TRN_PT_MAX_NAME];
    const struct pt_obj *o = &pt->objs[d];
    for (uint32_t i = 0; i + 1 < o->n; i += 2) {
        const int32_t v = o->items[i + 1];
        if (pt->objs[v].kind == PT_NONE) continue;
        int rc = join(pt, name, prefix, o->items[i]);
        if (rc) return rc;
        if (!param && in_set(pt, skip_set, o->items[i])) continue;
        if (pt->objs[v].kind != PT_TENSOR)
            return pt_fail(pt, -TRN_PT_ESTRUCT, "%s is not a tensor", name);
        if ((rc = sd_add(pt, name, v, param || pt->objs[v].param))) return rc;
    }
    return 0;
}

static int walk(struct trn_pt *pt, int32_t o, const char *prefix, int depth)
{
    if (depth > TRN_PT_MAX_DEPTH)
        return pt_fail(pt, -TRN_PT_ELIMIT, "%s: nested deeper than %d", prefix, TRN_PT_MAX_DEPTH);
    if (++pt->steps > (1ull << 30)) return pt_fail(pt, -TRN_PT_ELIMIT, "object tree too large");
    const struct pt_obj *x = &pt->objs[o];
    char name[TRN_PT_MAX_NAME + 1];
    int rc;
    if (x->kind == PT_OBJ) {
        const int32_t st = pt_obj_state(pt, o);
        const int32_t mods = pt_dict_get(pt, st, "_modules");
        if (st < 0 || mods < 0)
            return pt_fail(
                pt, -TRN_PT_ESTRUCT, "%s: a %s without module state", prefix[0] ? prefix : "(root)",
                x->a >= 0 && pt->objs[x->a].kind == PT_GLOBAL ? pt->objs[x->a].s : "object");
        const int32_t skip = pt_dict_get(pt, st, "_non_persistent_buffers_set");
        if ((rc = walk_tensors(pt, pt_dict_get(pt, st, "_parameters"), prefix, true, -1)) ||
            (rc = walk_tensors(pt, pt_dict_get(pt, st, "_buffers"), prefix, false, skip)))
            return rc;
        if (pt->objs[mods].kind != PT_DICT)
            return pt_fail(pt, -TRN_PT_ESTRUCT, "%s: _modules is not a dict", prefix);
        const struct pt_obj *m = &pt->objs[mods];
        for (uint32_t i = 0; i + 1 < m->n; i += 2) {
            const int32_t child = m->items[i + 1];
            if (pt->objs[child].kind == PT_NONE) continue;
            if ((rc = join(pt, name, prefix, m->items[i]))) return rc;
            strcat(name, ".");
            if ((rc = walk(pt, child, name, depth + 1))) return rc;
        }
        return 0;
    }
    if (x->kind == PT_DICT) {
        for (uint32_t i = 0; i + 1 < x->n; i += 2) {
            const int32_t v = x->items[i + 1];
            if ((rc = join(pt, name, prefix, x->items[i]))) return rc;
            const int k = pt->objs[v].kind;
            if (k == PT_TENSOR) {
                if ((rc = sd_add(pt, name, v, pt->objs[v].param))) return rc;
            } else if (k == PT_DICT || k == PT_OBJ) {
                strcat(name, ".");
                if ((rc = walk(pt, v, name, depth + 1))) return rc;
            } else if (k != PT_NONE) {
                return pt_fail(pt, -TRN_PT_ESTRUCT, "%s is neither a tensor nor a module", name);
            }
        }
        return 0;
    }
    return pt_fail(pt, -TRN_PT_ESTRUCT, "%s: not a module or a dict of tensors",
                   prefix[0] ? prefix : "(root)");
}

int trn_pt_state_dict(struct trn_pt *pt, const char *which, const struct trn_pt_tensor **out,
                      char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!pt || !out) return -EINVAL;
    pt->err = err;
    pt->err_cap = err_cap;
    for (int i = 0; i < pt->n_sd; i++)
        free(pt->sd_names[i]);
    pt->n_sd = 0;
    pt->steps = 0;
    const char *key = which ? which : trn_pt_default_key(pt);
    int rc;
    const int32_t o = pt_resolve(pt, which);
    if (o < 0) {
        rc = pt_fail(pt, -TRN_PT_ESTRUCT, "no key '%s' in the checkpoint", key ? key : "");
    } else if (pt->objs[o].kind == PT_NONE) {
        rc = pt_fail(pt, -TRN_PT_ESTRUCT, "checkpoint '%s' is None%s", key ? key : "",
                     key && strcmp(key, "ema") == 0 ? " (a released checkpoint: use 'model')" : "");
    } else {
        rc = walk(pt, o, "", 0);
    }
    pt->err = NULL;
    pt->err_cap = 0;
    if (rc) {
        for (int i = 0; i < pt->n_sd; i++)
            free(pt->sd_names[i]);
        pt->n_sd = 0;
        return rc;
    }
    *out = pt->sd;
    return pt->n_sd;
}

/* ---------------------------------------------------------------------------------------- */
/* Reading elements                                                                         */

static int sd_index(const struct trn_pt *pt, const struct trn_pt_tensor *t)
{
    if (!pt || !t || !pt->sd || t < pt->sd || t >= pt->sd + pt->n_sd) return -1;
    return (int)(t - pt->sd);
}

/* The storage bytes t's view reads (at least), checked on first use. */
static int storage_of(const struct trn_pt *pt, const struct trn_pt_tensor *t, const uint8_t **b)
{
    const int i = sd_index(pt, t);
    if (i < 0) return -EINVAL;
    const struct pt_tensor_raw *r = &pt->tensors[pt->sd_raw[i]];
    const struct pt_storage *s = &pt->storages[r->storage];
    const uint64_t need = (uint64_t)(r->last + 1) * trn_pt_dtype_size(s->dtype);
    /* the handle is the reader's state: reading fills its cache of checked bytes */
    return pt_zip_get_prefix((struct trn_pt *)pt, s->entry, need, b);
}

int trn_pt_tensor_check(const struct trn_pt *pt, const struct trn_pt_tensor *t)
{
    const uint8_t *b = NULL;
    return storage_of(pt, t, &b);
}

const void *trn_pt_storage(const struct trn_pt *pt, const struct trn_pt_tensor *t)
{
    const uint8_t *b = NULL;
    return storage_of(pt, t, &b) == 0 ? b : NULL;
}

void trn_pt_set_inflate_budget(struct trn_pt *pt, uint64_t bytes)
{
    if (pt) pt->inflate_budget = bytes > pt->inflated ? bytes : pt->inflated;
}

static double elem(const uint8_t *b, enum trn_pt_dtype d, int64_t k, int64_t *iv)
{
    const size_t at = (size_t)k * trn_pt_dtype_size(d);
    union {
        uint16_t u16;
        int16_t i16;
        float f32;
        uint32_t u32;
        int32_t i32;
        double f64;
        int64_t i64;
    } u;
    memcpy(&u, b + at, trn_pt_dtype_size(d));
    switch (d) {
    case TRN_PT_F16:
        return trn_pt_half_to_float(u.u16);
    case TRN_PT_BF16: {
        const uint32_t bits = (uint32_t)u.u16 << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    case TRN_PT_F32:
        return u.f32;
    case TRN_PT_F64:
        return u.f64;
    case TRN_PT_I64:
        *iv = u.i64;
        return (double)u.i64;
    case TRN_PT_I32:
        *iv = u.i32;
        return u.i32;
    case TRN_PT_I16:
        *iv = u.i16;
        return u.i16;
    case TRN_PT_I8:
        *iv = (int8_t)b[at];
        return (int8_t)b[at];
    case TRN_PT_U8:
    case TRN_PT_BOOL:
        *iv = b[at];
        return b[at];
    }
    return 0;
}

/* Visit the view's elements in row-major order. */
static int64_t gather(const struct trn_pt *pt, const struct trn_pt_tensor *t, float *f, int64_t *iv,
                      size_t dst_len)
{
    if ((uint64_t)t->numel > dst_len) return -EINVAL;
    const uint8_t *b = NULL;
    const int rc = storage_of(pt, t, &b);
    if (rc < 0) return rc;
    int64_t idx[TRN_PT_MAX_DIMS] = { 0 };
    for (int64_t n = 0; n < t->numel; n++) {
        int64_t k = t->offset;
        for (int d = 0; d < t->ndim; d++)
            k += idx[d] * t->stride[d];
        int64_t ival = 0;
        const double v = elem(b, t->dtype, k, &ival);
        if (f) f[n] = (float)v;
        if (iv) iv[n] = ival;
        for (int d = t->ndim; d-- > 0;) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return t->numel;
}

int64_t trn_pt_tensor_read_f32(const struct trn_pt *pt, const struct trn_pt_tensor *t, float *dst,
                               size_t dst_len)
{
    if (!dst && t && t->numel) return -EINVAL;
    return gather(pt, t, dst, NULL, dst_len);
}

int64_t trn_pt_tensor_read_i64(const struct trn_pt *pt, const struct trn_pt_tensor *t, int64_t *dst,
                               size_t dst_len)
{
    if (!t || (!dst && t->numel)) return -EINVAL;
    if (t->dtype == TRN_PT_F16 || t->dtype == TRN_PT_BF16 || t->dtype == TRN_PT_F32 ||
        t->dtype == TRN_PT_F64)
        return -TRN_PT_EUNSUPPORTED;
    return gather(pt, t, NULL, dst, dst_len);
}

/* ---------------------------------------------------------------------------------------- */
/* Model attributes and yaml                                                                */

static int32_t model_attr(const struct trn_pt *pt, const char *which, const char *attr)
{
    if (!pt || !attr) return -1;
    const int32_t o = pt_resolve(pt, which);
    if (o < 0) return -1;
    return pt_dict_get(pt, pt_obj_state(pt, o), attr);
}

int trn_pt_model_attr_int(const struct trn_pt *pt, const char *which, const char *attr,
                          int64_t *out)
{
    const int32_t v = model_attr(pt, which, attr);
    if (v < 0 || pt->objs[v].kind != PT_INT || !out) return -TRN_PT_ESTRUCT;
    *out = pt->objs[v].i;
    return 0;
}

int trn_pt_model_attr_str(const struct trn_pt *pt, const char *which, const char *attr,
                          const char **out)
{
    const int32_t v = model_attr(pt, which, attr);
    if (v < 0 || pt->objs[v].kind != PT_STR || !out) return -TRN_PT_ESTRUCT;
    /* Strings point into the pickle and lack a NUL: keep a terminated copy. */
    struct trn_pt *mpt = (struct trn_pt *)pt;
    for (uint32_t i = 0; i < mpt->n_strings; i++)
        if (strlen(mpt->strings[i]) == pt->objs[v].len &&
            memcmp(mpt->strings[i], pt->objs[v].s, pt->objs[v].len) == 0) {
            *out = mpt->strings[i];
            return 0;
        }
    if (memchr(pt->objs[v].s, '\0', pt->objs[v].len)) return -TRN_PT_ESTRUCT;
    char *s = strndup(pt->objs[v].s, pt->objs[v].len);
    if (!s) return -ENOMEM;
    if (mpt->n_strings == mpt->cap_strings) {
        const uint32_t nc = mpt->cap_strings ? mpt->cap_strings * 2 : 64;
        char **a = realloc(mpt->strings, nc * sizeof *a);
        if (!a) {
            free(s);
            return -ENOMEM;
        }
        mpt->strings = a;
        mpt->cap_strings = nc;
    }
    mpt->strings[mpt->n_strings++] = s;
    *out = s;
    return 0;
}

struct ybuf {
    char *dst;
    size_t cap, len;
};

static void yput(struct ybuf *y, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, y->len++)
        if (y->len + 1 < y->cap) y->dst[y->len] = s[i];
}

static void yputs(struct ybuf *y, const char *s)
{
    yput(y, s, strlen(s));
}

/* Python's repr-style shortest round-trip double. */
static void yfloat(struct ybuf *y, double d)
{
    char b[40];
    if (isnan(d)) {
        yputs(y, ".nan");
        return;
    }
    if (isinf(d)) {
        yputs(y, d > 0 ? ".inf" : "-.inf");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, d);
        if (strtod(b, NULL) == d) break;
    }
    /* Keep it a float for YAML readers: "1" would read back as an int. */
    if (!strpbrk(b, ".eEn")) strcat(b, ".0");
    yputs(y, b);
}

static int yemit(const struct trn_pt *pt, struct ybuf *y, int32_t o, int depth)
{
    if (depth > TRN_PT_MAX_DEPTH) return -TRN_PT_ELIMIT;
    const struct pt_obj *x = &pt->objs[o];
    char b[48];
    int rc;
    switch (x->kind) {
    case PT_NONE:
        yputs(y, "null");
        return 0;
    case PT_BOOL:
        yputs(y, x->i ? "True" : "False");
        return 0;
    case PT_INT:
        snprintf(b, sizeof b, "%" PRId64, x->i);
        yputs(y, b);
        return 0;
    case PT_FLOAT:
        yfloat(y, x->f);
        return 0;
    case PT_STR:
        /* Single-quoted YAML: only ' needs escaping (as ''); control bytes are refused. */
        yputs(y, "'");
        for (uint32_t i = 0; i < x->len; i++) {
            if ((unsigned char)x->s[i] < 0x20) return -TRN_PT_ESTRUCT;
            yput(y, x->s[i] == '\'' ? "''" : &x->s[i], x->s[i] == '\'' ? 2 : 1);
        }
        yputs(y, "'");
        return 0;
    case PT_LIST:
    case PT_TUPLE:
        yputs(y, "[");
        for (uint32_t i = 0; i < x->n; i++) {
            if (i) yputs(y, ", ");
            if ((rc = yemit(pt, y, x->items[i], depth + 1))) return rc;
        }
        yputs(y, "]");
        return 0;
    case PT_DICT:
        yputs(y, "{");
        for (uint32_t i = 0; i + 1 < x->n; i += 2) {
            if (i) yputs(y, ", ");
            if ((rc = yemit(pt, y, x->items[i], depth + 1))) return rc;
            yputs(y, ": ");
            if ((rc = yemit(pt, y, x->items[i + 1], depth + 1))) return rc;
        }
        yputs(y, "}");
        return 0;
    default:
        return -TRN_PT_ESTRUCT;
    }
}

int trn_pt_model_yaml(const struct trn_pt *pt, const char *which, char *dst, size_t dst_cap)
{
    const int32_t v = model_attr(pt, which, "yaml");
    if (v < 0 || pt->objs[v].kind != PT_DICT) return -TRN_PT_ESTRUCT;
    struct ybuf y = { dst, dst_cap, 0 };
    const int rc = yemit(pt, &y, v, 0);
    if (rc) return rc;
    yputs(&y, "\n");
    if (dst && dst_cap) dst[y.len < dst_cap ? y.len : dst_cap - 1] = '\0';
    return y.len > INT32_MAX ? -TRN_PT_ELIMIT : (int)y.len;
}
