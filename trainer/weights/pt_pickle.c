/*
 * The pickle machine of the .pt reader. It implements the data-building opcodes of pickle
 * protocols 2-5 (what torch.save writes) and refuses the text-protocol ones. It never imports,
 * calls or evaluates anything: GLOBAL names a class by string, REDUCE/NEWOBJ/BUILD record what
 * would have been called. A few torch callables are recognised by name and turned into data.
 * Every opcode argument is bounds-checked; stack pops never cross the current MARK.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "priv/pt_internal.h"

/* Work budget: opcodes plus items touched by linear searches; ~1 s at worst. */
#define PT_MAX_STEPS (1ull << 28)

struct vm {
    struct trn_pt *pt;
    const uint8_t *p;
    size_t len, pos, op_pos;
    int32_t *stack;
    uint32_t sp, cap;
    uint32_t marks[TRN_PT_MAX_MARKS];
    uint32_t n_marks;
    int32_t *memo;
    uint32_t memo_cap;
    uint32_t memo_used; /* filled slots: MEMOIZE's next index, as len(memo) in Python */
};

#define FAIL(v, rc, ...) vm_fail((v), (rc), __VA_ARGS__)

static int vm_fail(struct vm *v, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int vm_fail(struct vm *v, int rc, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pt_fail(v->pt, rc, "%s: offset %zu: %s", v->pt->pkl_entry, v->op_pos, msg);
}

static int new_obj(struct vm *v, enum pt_kind kind, int32_t *out)
{
    struct trn_pt *pt = v->pt;
    if (pt->n_objs >= TRN_PT_MAX_OBJECTS)
        return FAIL(v, -TRN_PT_ELIMIT, "more than %u objects", TRN_PT_MAX_OBJECTS);
    if (pt->n_objs == pt->cap_objs) {
        const uint32_t nc = pt->cap_objs ? pt->cap_objs * 2 : 1024;
        struct pt_obj *o = realloc(pt->objs, nc * sizeof *o);
        if (!o) return FAIL(v, -ENOMEM, "out of memory");
        pt->objs = o;
        pt->cap_objs = nc;
    }
    struct pt_obj *o = &pt->objs[pt->n_objs];
    memset(o, 0, sizeof *o);
    o->kind = (uint8_t)kind;
    o->a = o->b = o->c = -1;
    *out = (int32_t)pt->n_objs++;
    return 0;
}

static int add_item(struct vm *v, int32_t obj, int32_t item)
{
    struct pt_obj *o = &v->pt->objs[obj];
    if (o->n == o->cap) {
        if (o->cap >= TRN_PT_MAX_STACK * 4u)
            return FAIL(v, -TRN_PT_ELIMIT, "container with more than %u items",
                        TRN_PT_MAX_STACK * 4u);
        const uint32_t nc = o->cap ? o->cap * 2 : 4;
        int32_t *it = realloc(o->items, nc * sizeof *it);
        if (!it) return FAIL(v, -ENOMEM, "out of memory");
        o->items = it;
        o->cap = nc;
    }
    o->items[o->n++] = item;
    return 0;
}

static int push(struct vm *v, int32_t x)
{
    if (v->sp == v->cap) {
        if (v->cap >= TRN_PT_MAX_STACK)
            return FAIL(v, -TRN_PT_ELIMIT, "stack deeper than %u", TRN_PT_MAX_STACK);
        const uint32_t nc = v->cap ? v->cap * 2 : 256;
        int32_t *s = realloc(v->stack, nc * sizeof *s);
        if (!s) return FAIL(v, -ENOMEM, "out of memory");
        v->stack = s;
        v->cap = nc;
    }
    v->stack[v->sp++] = x;
    return 0;
}

/* The lowest stack index the current frame may pop to. */
static uint32_t frame_base(const struct vm *v)
{
    return v->n_marks ? v->marks[v->n_marks - 1] : 0;
}

static int pop(struct vm *v, int32_t *out)
{
    if (v->sp <= frame_base(v)) return FAIL(v, -TRN_PT_EPICKLE, "stack underflow");
    *out = v->stack[--v->sp];
    return 0;
}

static int top(struct vm *v, int32_t *out)
{
    if (v->sp <= frame_base(v)) return FAIL(v, -TRN_PT_EPICKLE, "stack underflow");
    *out = v->stack[v->sp - 1];
    return 0;
}

/* Items since the last MARK: stack[*base .. sp); the MARK is popped. */
static int pop_mark(struct vm *v, uint32_t *base)
{
    if (!v->n_marks) return FAIL(v, -TRN_PT_EPICKLE, "no MARK on the stack");
    *base = v->marks[--v->n_marks];
    return 0;
}

static int need(struct vm *v, size_t n)
{
    if (v->len - v->pos < n) return FAIL(v, -TRN_PT_EPICKLE, "truncated opcode argument");
    return 0;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t x = 0;
    for (int i = n; i-- > 0;)
        x = x << 8 | p[i];
    return x;
}

static int make_str(struct vm *v, const uint8_t *s, uint64_t n, int32_t *out)
{
    if (n > TRN_PT_MAX_STRING)
        return FAIL(v, -TRN_PT_ELIMIT, "string of %llu bytes (limit %u)", (unsigned long long)n,
                    TRN_PT_MAX_STRING);
    int rc = new_obj(v, PT_STR, out);
    if (rc) return rc;
    v->pt->objs[*out].s = (const char *)s;
    v->pt->objs[*out].len = (uint32_t)n;
    return 0;
}

static int op_string(struct vm *v, int len_bytes)
{
    int rc = need(v, (size_t)len_bytes);
    if (rc) return rc;
    const uint64_t n = le(v->p + v->pos, len_bytes);
    v->pos += (size_t)len_bytes;
    if (n > v->len - v->pos) return FAIL(v, -TRN_PT_EPICKLE, "string runs past the end");
    int32_t o = -1;
    if ((rc = make_str(v, v->p + v->pos, n, &o))) return rc;
    v->pos += (size_t)n;
    return push(v, o);
}

static int keep_string(struct vm *v, char *s)
{
    struct trn_pt *pt = v->pt;
    if (pt->n_strings == pt->cap_strings) {
        const uint32_t nc = pt->cap_strings ? pt->cap_strings * 2 : 64;
        char **a = realloc(pt->strings, nc * sizeof *a);
        if (!a) {
            free(s);
            return FAIL(v, -ENOMEM, "out of memory");
        }
        pt->strings = a;
        pt->cap_strings = nc;
    }
    pt->strings[pt->n_strings++] = s;
    return 0;
}

static int make_global(struct vm *v, const uint8_t *mod, size_t mlen, const uint8_t *name,
                       size_t nlen)
{
    if (mlen > 1024 || nlen > 1024) return FAIL(v, -TRN_PT_ELIMIT, "GLOBAL name too long");
    char *s = malloc(mlen + nlen + 2);
    if (!s) return FAIL(v, -ENOMEM, "out of memory");
    memcpy(s, mod, mlen);
    s[mlen] = '.';
    memcpy(s + mlen + 1, name, nlen);
    s[mlen + 1 + nlen] = '\0';
    if (strlen(s) != mlen + 1 + nlen) {
        free(s);
        return FAIL(v, -TRN_PT_EPICKLE, "NUL in a GLOBAL name");
    }
    int rc = keep_string(v, s);
    if (rc) return rc;
    /* Old pickles name builtins "__builtin__"; normalise so lookups need one spelling. */
    if (strncmp(s, "__builtin__.", 12) == 0) {
        memcpy(s, "builtins", 8);
        memmove(s + 8, s + 11, strlen(s + 11) + 1);
    }
    int32_t o = -1;
    if ((rc = new_obj(v, PT_GLOBAL, &o))) return rc;
    v->pt->objs[o].s = s;
    v->pt->objs[o].len = (uint32_t)strlen(s);
    return push(v, o);
}

static bool is_global(const struct trn_pt *pt, int32_t o, const char *name)
{
    return o >= 0 && pt->objs[o].kind == PT_GLOBAL && strcmp(pt->objs[o].s, name) == 0;
}

static const struct {
    const char *name;
    enum trn_pt_dtype dtype;
} storage_types[] = {
    { "torch.HalfStorage", TRN_PT_F16 },  { "torch.BFloat16Storage", TRN_PT_BF16 },
    { "torch.FloatStorage", TRN_PT_F32 }, { "torch.DoubleStorage", TRN_PT_F64 },
    { "torch.LongStorage", TRN_PT_I64 },  { "torch.IntStorage", TRN_PT_I32 },
    { "torch.ShortStorage", TRN_PT_I16 }, { "torch.CharStorage", TRN_PT_I8 },
    { "torch.ByteStorage", TRN_PT_U8 },   { "torch.BoolStorage", TRN_PT_BOOL },
};

/* BINPERSID: ('storage', torch.XStorage, key, location, numel) -> a storage object. */
static int persistent_load(struct vm *v, int32_t pid, int32_t *out)
{
    struct trn_pt *pt = v->pt;
    const struct pt_obj *t = &pt->objs[pid];
    if (t->kind != PT_TUPLE || t->n != 5 || !pt_str_eq(pt, t->items[0], "storage"))
        return FAIL(v, -TRN_PT_EPICKLE, "persistent id is not ('storage', type, key, loc, n)");
    const struct pt_obj *ty = &pt->objs[t->items[1]], *key = &pt->objs[t->items[2]],
                        *num = &pt->objs[t->items[4]];
    if (ty->kind != PT_GLOBAL) return FAIL(v, -TRN_PT_EPICKLE, "storage type is not a class");
    int dt = -1;
    for (size_t i = 0; i < sizeof storage_types / sizeof storage_types[0]; i++)
        if (strcmp(ty->s, storage_types[i].name) == 0) dt = (int)storage_types[i].dtype;
    if (dt < 0) return FAIL(v, -TRN_PT_EUNSUPPORTED, "storage type %s", ty->s);
    if (key->kind != PT_STR || key->len == 0 || key->len > 64 || memchr(key->s, '\0', key->len) ||
        memchr(key->s, '/', key->len))
        return FAIL(v, -TRN_PT_EPICKLE, "bad storage key");
    if (num->kind != PT_INT || num->i < 0 || num->i > (INT64_C(1) << 40))
        return FAIL(v, -TRN_PT_EPICKLE, "bad storage size");
    char name[sizeof pt->prefix + 80];
    snprintf(name, sizeof name, "%sdata/%.*s", pt->prefix, (int)key->len, key->s);
    /* One storage object per key, as torch's loader caches them. */
    for (uint32_t i = 0; i < pt->n_storages; i++) {
        pt->steps++;
        if (strcmp(pt->storages[i].entry->name, name) == 0) {
            if ((int)pt->storages[i].dtype != dt || pt->storages[i].numel != num->i)
                return FAIL(v, -TRN_PT_EPICKLE, "storage %s used with two types or sizes", name);
            const int rc = new_obj(v, PT_STORAGE, out);
            if (rc) return rc;
            pt->objs[*out].i = i;
            return 0;
        }
    }
    struct pt_entry *e = pt_zip_find(pt, name);
    if (!e) return FAIL(v, -TRN_PT_ESTRUCT, "storage entry %s missing from the archive", name);
    const uint64_t bytes = (uint64_t)num->i * trn_pt_dtype_size((enum trn_pt_dtype)dt);
    if (e->usize < bytes)
        return FAIL(v, -TRN_PT_ESTRUCT, "%s: %llu bytes, storage needs %llu", name,
                    (unsigned long long)e->usize, (unsigned long long)bytes);
    if (pt->n_storages == pt->cap_storages) {
        const uint32_t nc = pt->cap_storages ? pt->cap_storages * 2 : 64;
        struct pt_storage *s = realloc(pt->storages, nc * sizeof *s);
        if (!s) return FAIL(v, -ENOMEM, "out of memory");
        pt->storages = s;
        pt->cap_storages = nc;
    }
    struct pt_storage *s = &pt->storages[pt->n_storages];
    s->dtype = (enum trn_pt_dtype)dt;
    s->numel = num->i;
    s->entry = e;
    s->key = NULL;
    int rc = new_obj(v, PT_STORAGE, out);
    if (rc) return rc;
    pt->objs[*out].i = pt->n_storages++;
    return 0;
}

static int tuple_ints(struct vm *v, int32_t t, int64_t *dst, int *n, const char *what)
{
    const struct pt_obj *o = &v->pt->objs[t];
    if (o->kind != PT_TUPLE) return FAIL(v, -TRN_PT_EPICKLE, "tensor %s is not a tuple", what);
    if (o->n > TRN_PT_MAX_DIMS)
        return FAIL(v, -TRN_PT_EUNSUPPORTED, "tensor with %u dims (limit %d)", o->n,
                    TRN_PT_MAX_DIMS);
    for (uint32_t i = 0; i < o->n; i++) {
        const struct pt_obj *x = &v->pt->objs[o->items[i]];
        if (x->kind != PT_INT || x->i < 0 || x->i > (INT64_C(1) << 40))
            return FAIL(v, -TRN_PT_EPICKLE, "tensor %s[%u] is not a size", what, i);
        dst[i] = x->i;
    }
    *n = (int)o->n;
    return 0;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]). */
static int rebuild_tensor(struct vm *v, int32_t args, int32_t *out)
{
    struct trn_pt *pt = v->pt;
    const struct pt_obj *a = &pt->objs[args];
    if (a->kind != PT_TUPLE || a->n < 4)
        return FAIL(v, -TRN_PT_EPICKLE,
                    "_rebuild_tensor_v2 needs (storage, offset, size, "
                    "stride, ...)");
    const struct pt_obj *st = &pt->objs[a->items[0]], *off = &pt->objs[a->items[1]];
    if (st->kind != PT_STORAGE) return FAIL(v, -TRN_PT_EPICKLE, "tensor without a storage");
    if (off->kind != PT_INT || off->i < 0)
        return FAIL(v, -TRN_PT_EPICKLE, "bad tensor storage offset");
    struct pt_tensor_raw t = { .storage = (int32_t)st->i, .offset = off->i };
    int nd_stride = 0;
    int rc = tuple_ints(v, a->items[2], t.shape, &t.ndim, "size");
    if (!rc) rc = tuple_ints(v, a->items[3], t.stride, &nd_stride, "stride");
    if (rc) return rc;
    if (nd_stride != t.ndim) return FAIL(v, -TRN_PT_EPICKLE, "size and stride differ in length");
    /* The largest element index must lie inside the storage (an empty tensor reads nothing). */
    const int64_t snumel = pt->storages[t.storage].numel;
    int64_t last = t.offset, numel = 1;
    for (int i = 0; i < t.ndim; i++) {
        numel = t.shape[i] == 0 || numel == 0 ? 0 : numel * t.shape[i];
        if (numel > (INT64_C(1) << 40)) return FAIL(v, -TRN_PT_ELIMIT, "tensor too large");
        if (t.shape[i] > 0) last += (t.shape[i] - 1) * t.stride[i];
        if (last > (INT64_C(1) << 50)) return FAIL(v, -TRN_PT_EPICKLE, "tensor view too large");
    }
    t.last = numel > 0 ? last : -1;
    if (numel > 0 && last >= snumel)
        return FAIL(v, -TRN_PT_EPICKLE,
                    "tensor view reaches element %lld of a %lld-element "
                    "storage",
                    (long long)last, (long long)snumel);
    if (pt->n_tensors == pt->cap_tensors) {
        const uint32_t nc = pt->cap_tensors ? pt->cap_tensors * 2 : 64;
        struct pt_tensor_raw *r = realloc(pt->tensors, nc * sizeof *r);
        if (!r) return FAIL(v, -ENOMEM, "out of memory");
        pt->tensors = r;
        pt->cap_tensors = nc;
    }
    if ((rc = new_obj(v, PT_TENSOR, out))) return rc;
    pt->tensors[pt->n_tensors] = t;
    pt->objs[*out].i = pt->n_tensors++;
    return 0;
}

/* What REDUCE(callable, args) makes. Only data builders are recognised; anything else is a
 * placeholder recording the call, never performed. */
static int reduce(struct vm *v, int32_t fn, int32_t args, int depth, int32_t *out)
{
    struct trn_pt *pt = v->pt;
    if (pt->objs[args].kind != PT_TUPLE) return FAIL(v, -TRN_PT_EPICKLE, "REDUCE args not a tuple");
    const struct pt_obj *a = &pt->objs[args];
    if (is_global(pt, fn, "collections.OrderedDict") && a->n == 0) return new_obj(v, PT_DICT, out);
    if (is_global(pt, fn, "torch._utils._rebuild_tensor_v2")) return rebuild_tensor(v, args, out);
    if (is_global(pt, fn, "torch._utils._rebuild_parameter") ||
        is_global(pt, fn, "torch._utils._rebuild_parameter_with_state")) {
        if (a->n < 1 || pt->objs[a->items[0]].kind != PT_TENSOR)
            return FAIL(v, -TRN_PT_EPICKLE, "_rebuild_parameter without a tensor");
        /* A parameter is the same view, marked trainable: copy the object, keep the table. */
        int rc = new_obj(v, PT_TENSOR, out);
        if (rc) return rc;
        pt->objs[*out].i = pt->objs[a->items[0]].i;
        pt->objs[*out].param = 1;
        return 0;
    }
    if (is_global(pt, fn, "torch._tensor._rebuild_from_type_v2") && a->n >= 3 && depth < 4) {
        /* (func, new_type, args, state): the tensor is func(*args). */
        return reduce(v, a->items[0], a->items[2], depth + 1, out);
    }
    int rc = new_obj(v, PT_OBJ, out);
    if (rc) return rc;
    pt->objs[*out].a = fn;
    pt->objs[*out].b = args;
    return 0;
}

static int memo_put(struct vm *v, uint64_t idx)
{
    int32_t x = -1;
    int rc = top(v, &x);
    if (rc) return rc;
    if (idx >= TRN_PT_MAX_MEMO)
        return FAIL(v, -TRN_PT_ELIMIT, "memo index %llu (limit %u)", (unsigned long long)idx,
                    TRN_PT_MAX_MEMO);
    if (idx >= v->memo_cap) {
        uint32_t nc = v->memo_cap ? v->memo_cap : 1024;
        while (nc <= idx)
            nc *= 2;
        int32_t *m = realloc(v->memo, nc * sizeof *m);
        if (!m) return FAIL(v, -ENOMEM, "out of memory");
        for (uint32_t i = v->memo_cap; i < nc; i++)
            m[i] = -1;
        v->memo = m;
        v->memo_cap = nc;
    }
    if (v->memo[idx] < 0) v->memo_used++;
    v->memo[idx] = x;
    return 0;
}

static int memo_get(struct vm *v, uint64_t idx)
{
    if (idx >= v->memo_cap || v->memo[idx] < 0)
        return FAIL(v, -TRN_PT_EPICKLE, "memo slot %llu is empty", (unsigned long long)idx);
    return push(v, v->memo[idx]);
}

/* dict[key] = value with Python semantics: an equal string key is replaced. */
static int set_item(struct vm *v, int32_t d, int32_t k, int32_t val)
{
    struct trn_pt *pt = v->pt;
    struct pt_obj *o = &pt->objs[d];
    if (o->kind == PT_OBJ) {
        if (o->listlike) return FAIL(v, -TRN_PT_EPICKLE, "SETITEM on a list-like object");
        o->dictlike = 1;
    } else if (o->kind != PT_DICT) {
        return FAIL(v, -TRN_PT_EPICKLE, "SETITEM on a non-dict");
    }
    const struct pt_obj *ko = &pt->objs[k];
    if (ko->kind == PT_STR) {
        for (uint32_t i = 0; i + 1 < o->n; i += 2) {
            pt->steps++;
            const struct pt_obj *x = &pt->objs[o->items[i]];
            if (x->kind == PT_STR && x->len == ko->len && memcmp(x->s, ko->s, x->len) == 0) {
                o->items[i + 1] = val;
                return 0;
            }
        }
    }
    int rc = add_item(v, d, k);
    return rc ? rc : add_item(v, d, val);
}

static int append(struct vm *v, int32_t l, int32_t x)
{
    struct pt_obj *o = &v->pt->objs[l];
    if (o->kind == PT_OBJ) {
        if (o->dictlike) return FAIL(v, -TRN_PT_EPICKLE, "APPEND on a dict-like object");
        o->listlike = 1;
    } else if (o->kind != PT_LIST) {
        return FAIL(v, -TRN_PT_EPICKLE, "APPEND on a non-list");
    }
    return add_item(v, l, x);
}

static int make_seq(struct vm *v, enum pt_kind kind, uint32_t base)
{
    int32_t o = -1;
    int rc = new_obj(v, kind, &o);
    for (uint32_t i = base; !rc && i < v->sp; i++)
        rc = add_item(v, o, v->stack[i]);
    if (rc) return rc;
    v->sp = base;
    return push(v, o);
}

static int step(struct vm *v, int *stop)
{
    int rc = 0;
    int32_t a = -1, b = -1, c = -1;
    uint32_t base = 0;
    v->op_pos = v->pos;
    const uint8_t op = v->p[v->pos++];
    switch (op) {
    case 0x80: /* PROTO */
        if ((rc = need(v, 1))) return rc;
        if (v->p[v->pos] > 5)
            return FAIL(v, -TRN_PT_EUNSUPPORTED, "pickle protocol %u", v->p[v->pos]);
        v->pos++;
        return 0;
    case 0x95: /* FRAME: a length hint only */
        if ((rc = need(v, 8))) return rc;
        v->pos += 8;
        return 0;
    case '.': /* STOP */
        if ((rc = pop(v, &a))) return rc;
        v->pt->root = a;
        *stop = 1;
        return 0;
    case '(': /* MARK */
        if (v->n_marks >= TRN_PT_MAX_MARKS)
            return FAIL(v, -TRN_PT_ELIMIT, "more than %d nested MARKs", TRN_PT_MAX_MARKS);
        v->marks[v->n_marks++] = v->sp;
        return 0;
    case '0': /* POP */
        if (v->sp == frame_base(v) && v->n_marks) {
            v->n_marks--; /* Python pops a MARK when the frame is empty */
            return 0;
        }
        return pop(v, &a);
    case '1': /* POP_MARK */
        if ((rc = pop_mark(v, &base))) return rc;
        v->sp = base;
        return 0;
    case '2': /* DUP */
        if ((rc = top(v, &a))) return rc;
        return push(v, a);
    case 'J':   /* BININT */
    case 'K':   /* BININT1 */
    case 'M': { /* BININT2 */
        const int n = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        if ((rc = need(v, (size_t)n))) return rc;
        int64_t x = (int64_t)le(v->p + v->pos, n);
        if (op == 'J') x = (int32_t)(uint32_t)x;
        v->pos += (size_t)n;
        if ((rc = new_obj(v, PT_INT, &a))) return rc;
        v->pt->objs[a].i = x;
        return push(v, a);
    }
    case 0x8a:   /* LONG1 */
    case 0x8b: { /* LONG4 */
        const int nb = op == 0x8a ? 1 : 4;
        if ((rc = need(v, (size_t)nb))) return rc;
        const uint64_t n = le(v->p + v->pos, nb);
        v->pos += (size_t)nb;
        if (n > 8)
            return FAIL(v, -TRN_PT_EUNSUPPORTED, "integer of %llu bytes", (unsigned long long)n);
        if ((rc = need(v, (size_t)n))) return rc;
        uint64_t x = le(v->p + v->pos, (int)n);
        if (n > 0 && n < 8 && (v->p[v->pos + n - 1] & 0x80)) x |= ~UINT64_C(0) << (8 * n);
        v->pos += (size_t)n;
        if ((rc = new_obj(v, PT_INT, &a))) return rc;
        v->pt->objs[a].i = (int64_t)x;
        return push(v, a);
    }
    case 'G': { /* BINFLOAT: big-endian double */
        if ((rc = need(v, 8))) return rc;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++)
            bits = bits << 8 | v->p[v->pos + (size_t)i];
        v->pos += 8;
        double d;
        memcpy(&d, &bits, sizeof d);
        if ((rc = new_obj(v, PT_FLOAT, &a))) return rc;
        v->pt->objs[a].f = d;
        return push(v, a);
    }
    case 'X': /* BINUNICODE */
    case 'T': /* BINSTRING */
    case 'B': /* BINBYTES */
        return op_string(v, 4);
    case 0x8c: /* SHORT_BINUNICODE */
    case 'U':  /* SHORT_BINSTRING */
    case 'C':  /* SHORT_BINBYTES */
        return op_string(v, 1);
    case 0x8d: /* BINUNICODE8 */
    case 0x8e: /* BINBYTES8 */
        return op_string(v, 8);
    case 'N':
        if ((rc = new_obj(v, PT_NONE, &a))) return rc;
        return push(v, a);
    case 0x88:
    case 0x89:
        if ((rc = new_obj(v, PT_BOOL, &a))) return rc;
        v->pt->objs[a].i = op == 0x88;
        return push(v, a);
    case '}':
    case ']':
    case ')':
    case 0x8f: /* EMPTY_SET: kept as a list */
        if ((rc = new_obj(v, op == '}' ? PT_DICT : op == ')' ? PT_TUPLE : PT_LIST, &a))) return rc;
        return push(v, a);
    case 0x85:
    case 0x86:
    case 0x87: { /* TUPLE1..3 */
        const uint32_t n = (uint32_t)(op - 0x84);
        if (v->sp < frame_base(v) + n) return FAIL(v, -TRN_PT_EPICKLE, "stack underflow");
        return make_seq(v, PT_TUPLE, v->sp - n);
    }
    case 't':  /* TUPLE */
    case 'l':  /* LIST */
    case 0x91: /* FROZENSET */
        if ((rc = pop_mark(v, &base))) return rc;
        return make_seq(v, op == 't' ? PT_TUPLE : PT_LIST, base);
    case 'd': /* DICT */
        if ((rc = pop_mark(v, &base))) return rc;
        if ((v->sp - base) % 2) return FAIL(v, -TRN_PT_EPICKLE, "odd number of dict items");
        if ((rc = new_obj(v, PT_DICT, &a))) return rc;
        for (uint32_t i = base; !rc && i < v->sp; i += 2)
            rc = set_item(v, a, v->stack[i], v->stack[i + 1]);
        if (rc) return rc;
        v->sp = base;
        return push(v, a);
    case 'a': /* APPEND */
        if ((rc = pop(v, &b)) || (rc = top(v, &a))) return rc;
        return append(v, a, b);
    case 'e':  /* APPENDS */
    case 0x90: /* ADDITEMS */
        if ((rc = pop_mark(v, &base))) return rc;
        if (base <= frame_base(v) || base == 0)
            return FAIL(v, -TRN_PT_EPICKLE, "APPENDS without a list");
        a = v->stack[base - 1];
        for (uint32_t i = base; !rc && i < v->sp; i++)
            rc = append(v, a, v->stack[i]);
        v->sp = base;
        return rc;
    case 's': /* SETITEM */
        if ((rc = pop(v, &c)) || (rc = pop(v, &b)) || (rc = top(v, &a))) return rc;
        return set_item(v, a, b, c);
    case 'u': /* SETITEMS */
        if ((rc = pop_mark(v, &base))) return rc;
        if (base <= frame_base(v) || base == 0)
            return FAIL(v, -TRN_PT_EPICKLE, "SETITEMS without a dict");
        if ((v->sp - base) % 2) return FAIL(v, -TRN_PT_EPICKLE, "odd number of dict items");
        a = v->stack[base - 1];
        for (uint32_t i = base; !rc && i < v->sp; i += 2)
            rc = set_item(v, a, v->stack[i], v->stack[i + 1]);
        v->sp = base;
        return rc;
    case 'q': /* BINPUT */
        if ((rc = need(v, 1))) return rc;
        return memo_put(v, v->p[v->pos++]);
    case 'r': /* LONG_BINPUT */
        if ((rc = need(v, 4))) return rc;
        v->pos += 4;
        return memo_put(v, le(v->p + v->pos - 4, 4));
    case 0x94: /* MEMOIZE */
        return memo_put(v, v->memo_used);
    case 'h': /* BINGET */
        if ((rc = need(v, 1))) return rc;
        return memo_get(v, v->p[v->pos++]);
    case 'j': /* LONG_BINGET */
        if ((rc = need(v, 4))) return rc;
        v->pos += 4;
        return memo_get(v, le(v->p + v->pos - 4, 4));
    case 'c': { /* GLOBAL "module\nname\n" */
        const uint8_t *m = v->p + v->pos;
        const uint8_t *nl1 = memchr(m, '\n', v->len - v->pos);
        if (!nl1) return FAIL(v, -TRN_PT_EPICKLE, "GLOBAL without a newline");
        const uint8_t *nm = nl1 + 1;
        const uint8_t *nl2 = memchr(nm, '\n', (size_t)(v->p + v->len - nm));
        if (!nl2) return FAIL(v, -TRN_PT_EPICKLE, "GLOBAL without a second newline");
        v->pos = (size_t)(nl2 + 1 - v->p);
        return make_global(v, m, (size_t)(nl1 - m), nm, (size_t)(nl2 - nm));
    }
    case 0x93: { /* STACK_GLOBAL */
        if ((rc = pop(v, &b)) || (rc = pop(v, &a))) return rc;
        const struct pt_obj *mo = &v->pt->objs[a], *no = &v->pt->objs[b];
        if (mo->kind != PT_STR || no->kind != PT_STR)
            return FAIL(v, -TRN_PT_EPICKLE, "STACK_GLOBAL needs two strings");
        return make_global(v, (const uint8_t *)mo->s, mo->len, (const uint8_t *)no->s, no->len);
    }
    case 'R': /* REDUCE */
        if ((rc = pop(v, &b)) || (rc = pop(v, &a))) return rc;
        if ((rc = reduce(v, a, b, 0, &c))) return rc;
        return push(v, c);
    case 0x81: /* NEWOBJ */
    case 0x92: /* NEWOBJ_EX: kwargs dropped */
        if (op == 0x92 && (rc = pop(v, &c))) return rc;
        if ((rc = pop(v, &b)) || (rc = pop(v, &a))) return rc;
        if (v->pt->objs[b].kind != PT_TUPLE)
            return FAIL(v, -TRN_PT_EPICKLE, "NEWOBJ args not a tuple");
        if (is_global(v->pt, a, "collections.OrderedDict")) {
            if ((rc = new_obj(v, PT_DICT, &c))) return rc;
            return push(v, c);
        }
        if ((rc = new_obj(v, PT_OBJ, &c))) return rc;
        v->pt->objs[c].a = a;
        v->pt->objs[c].b = b;
        return push(v, c);
    case 'b': /* BUILD */
        if ((rc = pop(v, &b)) || (rc = top(v, &a))) return rc;
        /* Only placeholders record state; tensors and dicts ignore it (nothing to run). */
        if (v->pt->objs[a].kind == PT_OBJ) v->pt->objs[a].c = b;
        return 0;
    case 'Q': /* BINPERSID */
        if ((rc = pop(v, &a))) return rc;
        if ((rc = persistent_load(v, a, &b))) return rc;
        return push(v, b);
    default:
        return FAIL(v, -TRN_PT_EUNSUPPORTED, "unknown or unsupported pickle opcode 0x%02x", op);
    }
}

int pt_pickle_run(struct trn_pt *pt, const uint8_t *p, size_t len)
{
    struct vm v = { .pt = pt, .p = p, .len = len };
    int rc = 0, stop = 0;
    pt->root = -1;
    while (!rc && !stop) {
        if (v.pos >= len) {
            v.op_pos = v.pos;
            rc = FAIL(&v, -TRN_PT_EPICKLE, "pickle ends without STOP");
            break;
        }
        if (++pt->steps > PT_MAX_STEPS) {
            rc = FAIL(&v, -TRN_PT_ELIMIT, "pickle needs too much work");
            break;
        }
        rc = step(&v, &stop);
    }
    free(v.stack);
    free(v.memo);
    return rc;
}
