/*
 * Model yaml -> values, as PyYAML's safe_load reads the file ultralytics' parse_model gets.
 *
 * libyaml's document API keeps an alias as a reference to its anchor, so a hostile file cannot
 * blow up memory through alias expansion; we copy values out with a depth limit. Plain scalars
 * are resolved with the YAML 1.1 rules PyYAML uses: null (~, null, empty), booleans
 * (true/false/yes/no/on/off in three spellings), ints (decimal, 0x, 0b, leading-0 octal,
 * underscores), floats (they need a '.', "1e3" stays a string, exponents need a sign); quoted
 * scalars are strings.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "priv/model_internal.h"

/* Nesting deeper than this is refused (the format needs 3: args -> anchors -> row). */
#define VAL_MAX_DEPTH 16

void trn_val_free(struct trn_val *v)
{
    if (!v) return;
    free(v->s);
    for (size_t i = 0; i < v->n; i++)
        trn_val_free(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

int trn_val_copy(struct trn_val *dst, const struct trn_val *src)
{
    *dst = *src;
    dst->s = NULL;
    dst->items = NULL;
    dst->n = 0;
    if (src->s && !(dst->s = strdup(src->s))) return -ENOMEM;
    if (src->type == TRN_VAL_LIST && src->n) {
        dst->items = calloc(src->n, sizeof *dst->items);
        if (!dst->items) {
            trn_val_free(dst);
            return -ENOMEM;
        }
        for (size_t i = 0; i < src->n; i++) {
            dst->n = i + 1;
            if (trn_val_copy(&dst->items[i], &src->items[i])) {
                trn_val_free(dst);
                return -ENOMEM;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Python str() of a value                                                                  */

static int put(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (*len + n + 1 > nc)
            nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return -ENOMEM;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int puts_(char **buf, size_t *len, size_t *cap, const char *s)
{
    return put(buf, len, cap, s, strlen(s));
}

/* Python's repr(float): the shortest digits that read back to v; positional notation for
 * decimal exponents -4 .. 15 (with ".0" when integral), else d.ddde+XX. */
static void float_repr(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]XX: split into sign, digits and the decimal exponent. */
    const bool neg = e[0] == '-';
    const char *p = e + neg;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    const int exp10 = atoi(p + 1);
    char *o = out;
    const char *const end = out + cap - 1;
#define EMIT(ch)                  \
    do {                          \
        if (o < end) *o++ = (ch); \
    } while (0)
    if (neg) EMIT('-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            EMIT('0');
            EMIT('.');
            for (int i = 0; i < -exp10 - 1; i++)
                EMIT('0');
            for (int i = 0; i < nd; i++)
                EMIT(digits[i]);
        } else {
            for (int i = 0; i <= exp10; i++)
                EMIT(i < nd ? digits[i] : '0');
            EMIT('.');
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++)
                    EMIT(digits[i]);
            else
                EMIT('0');
        }
    } else {
        EMIT(digits[0]);
        if (nd > 1) {
            EMIT('.');
            for (int i = 1; i < nd; i++)
                EMIT(digits[i]);
        }
        EMIT('e');
        EMIT(exp10 < 0 ? '-' : '+');
        char x[16];
        snprintf(x, sizeof x, "%02d", exp10 < 0 ? -exp10 : exp10);
        for (const char *q = x; *q; q++)
            EMIT(*q);
    }
#undef EMIT
    *o = '\0';
}

int trn_val_repr(const struct trn_val *v, char **buf, size_t *len, size_t *cap)
{
    char tmp[48];
    switch (v->type) {
    case TRN_VAL_NONE:
        return puts_(buf, len, cap, "None");
    case TRN_VAL_BOOL:
        return puts_(buf, len, cap, v->i ? "True" : "False");
    case TRN_VAL_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->i);
        return puts_(buf, len, cap, tmp);
    case TRN_VAL_FLOAT:
        float_repr(v->f, tmp, sizeof tmp);
        return puts_(buf, len, cap, tmp);
    case TRN_VAL_STR: {
        /* repr(str): single quotes unless the text has ' and no ". */
        const char q = strchr(v->s, '\'') && !strchr(v->s, '"') ? '"' : '\'';
        int rc = put(buf, len, cap, &q, 1);
        for (const char *s = v->s; !rc && *s; s++) {
            if (*s == q || *s == '\\') rc = put(buf, len, cap, "\\", 1);
            if (!rc) rc = put(buf, len, cap, s, 1);
        }
        return rc ? rc : put(buf, len, cap, &q, 1);
    }
    case TRN_VAL_LIST: {
        int rc = puts_(buf, len, cap, "[");
        for (size_t i = 0; !rc && i < v->n; i++) {
            if (i) rc = puts_(buf, len, cap, ", ");
            if (!rc) rc = trn_val_repr(&v->items[i], buf, len, cap);
        }
        return rc ? rc : puts_(buf, len, cap, "]");
    }
    case TRN_VAL_MAP:
        return puts_(buf, len, cap, "{...}");
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* YAML 1.1 scalar resolution (PyYAML's Resolver + SafeConstructor)                         */

static bool one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return true;
    return false;
}

/* s without underscores into dst (cap > strlen(s)). */
static void strip_underscores(const char *s, char *dst)
{
    for (; *s; s++)
        if (*s != '_') *dst++ = *s;
    *dst = '\0';
}

static bool is_digit_(char c, int base)
{
    if (c == '_') return true;
    if (base == 2) return c == '0' || c == '1';
    if (base == 8) return c >= '0' && c <= '7';
    if (base == 10) return c >= '0' && c <= '9';
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool all_digits(const char *s, int base, bool need_one)
{
    if (need_one && !*s) return false;
    for (; *s; s++)
        if (!is_digit_(*s, base)) return false;
    return true;
}

/* The int forms of YAML 1.1 (sexagesimal aside). On a match, *out gets the value; a value
 * beyond int64 does not match (it stays a string; model.c then refuses it by type). */
static bool resolve_int(const char *s, int64_t *out)
{
    const char *p = s;
    const bool neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    int base;
    const char *d;
    if (p[0] == '0' && p[1] == 'b') {
        base = 2;
        d = p + 2;
        if (!all_digits(d, 2, true)) return false;
    } else if (p[0] == '0' && p[1] == 'x') {
        base = 16;
        d = p + 2;
        if (!all_digits(d, 16, true)) return false;
    } else if (p[0] == '0' && p[1]) {
        base = 8;
        d = p + 1;
        if (!all_digits(d, 8, true)) return false;
    } else if (p[0] == '0') {
        *out = 0;
        return true;
    } else if (p[0] >= '1' && p[0] <= '9') {
        base = 10;
        d = p;
        if (!all_digits(d, 10, true)) return false;
    } else {
        return false;
    }
    uint64_t v = 0;
    for (; *d; d++) {
        if (*d == '_') continue;
        const int x = *d <= '9' ? *d - '0' : (*d | 0x20) - 'a' + 10;
        if (v > (UINT64_MAX - (uint64_t)x) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)x;
    }
    if (v > (uint64_t)INT64_MAX) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)? | \.[0-9_]+([eE][-+][0-9]+)? | inf | nan */
static bool resolve_float(const char *s, double *out)
{
    static const char *const inf[] = { ".inf", ".Inf", ".INF", NULL };
    static const char *const nan_[] = { ".nan", ".NaN", ".NAN", NULL };
    const char *p = s;
    bool sign = false;
    if (*p == '-' || *p == '+') {
        p++;
        sign = true;
    }
    if (one_of(p, inf)) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    if (!sign && one_of(p, nan_)) {
        *out = NAN;
        return true;
    }
    const char *q = p;
    if (*q >= '0' && *q <= '9') {
        while ((*q >= '0' && *q <= '9') || *q == '_')
            q++;
        if (*q != '.') return false;
        q++;
        while ((*q >= '0' && *q <= '9') || *q == '_')
            q++;
    } else if (*q == '.' && !sign) {
        q++;
        if (!((*q >= '0' && *q <= '9') || *q == '_')) return false;
        while ((*q >= '0' && *q <= '9') || *q == '_')
            q++;
    } else {
        return false;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q != '-' && *q != '+') return false;
        q++;
        if (!(*q >= '0' && *q <= '9')) return false;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q) return false;
    char buf[128];
    if (strlen(s) >= sizeof buf) return false;
    strip_underscores(s, buf);
    *out = strtod(buf, NULL);
    return true;
}

static int scalar_val(const yaml_node_t *n, struct trn_val *v)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
    static const char *const trues[] = { "yes",  "Yes", "YES", "true", "True",
                                         "TRUE", "on",  "On",  "ON",   NULL };
    static const char *const falses[] = { "no",    "No",  "NO",  "false", "False",
                                          "FALSE", "off", "Off", "OFF",   NULL };
    const char *s = (const char *)n->data.scalar.value;
    const size_t l = n->data.scalar.length;
    if (memchr(s, '\0', l)) {
        v->type = TRN_VAL_STR;
        v->s = strndup(s, strnlen(s, l));
        return v->s ? 0 : -ENOMEM;
    }
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (one_of(s, nulls)) {
            v->type = TRN_VAL_NONE;
            return 0;
        }
        if (one_of(s, trues) || one_of(s, falses)) {
            v->type = TRN_VAL_BOOL;
            v->i = one_of(s, trues);
            return 0;
        }
        if (resolve_int(s, &v->i)) {
            v->type = TRN_VAL_INT;
            return 0;
        }
        if (resolve_float(s, &v->f)) {
            v->type = TRN_VAL_FLOAT;
            return 0;
        }
    }
    v->type = TRN_VAL_STR;
    v->s = strndup(s, l);
    return v->s ? 0 : -ENOMEM;
}

static int node_val(yaml_document_t *doc, const yaml_node_t *n, int depth, struct trn_val *v,
                    const char *file, char *err, size_t cap)
{
    memset(v, 0, sizeof *v);
    v->line = n->start_mark.line + 1;
    if (depth > VAL_MAX_DEPTH)
        return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s:%zu: nesting deeper than %d", file,
                        v->line, VAL_MAX_DEPTH);
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return scalar_val(n, v);
    case YAML_MAPPING_NODE:
        v->type = TRN_VAL_MAP;
        return 0;
    case YAML_SEQUENCE_NODE: {
        v->type = TRN_VAL_LIST;
        const size_t cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
        if (!cnt) return 0;
        v->items = calloc(cnt, sizeof *v->items);
        if (!v->items) return -ENOMEM;
        for (size_t i = 0; i < cnt; i++) {
            const yaml_node_t *c = yaml_document_get_node(doc, n->data.sequence.items.start[i]);
            v->n = i + 1;
            if (!c)
                return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s:%zu: bad node", file, v->line);
            const int rc = node_val(doc, c, depth + 1, &v->items[i], file, err, cap);
            if (rc) return rc;
        }
        return 0;
    }
    default:
        return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s:%zu: empty node", file, v->line);
    }
}

void trn_spec_free(struct trn_spec *spec)
{
    if (!spec) return;
    for (int k = 0; k < TRN_KEY_N; k++)
        trn_val_free(&spec->key[k]);
    for (size_t i = 0; i < spec->n_rows; i++) {
        trn_val_free(&spec->rows[i].from);
        trn_val_free(&spec->rows[i].number);
        trn_val_free(&spec->rows[i].module);
        trn_val_free(&spec->rows[i].args);
    }
    free(spec->rows);
    memset(spec, 0, sizeof *spec);
}

static const char *const key_names[TRN_KEY_N] = {
    [TRN_KEY_NC] = "nc",
    [TRN_KEY_GD] = "depth_multiple",
    [TRN_KEY_GW] = "width_multiple",
    [TRN_KEY_ANCHORS] = "anchors",
    [TRN_KEY_CH] = "ch",
    [TRN_KEY_ACTIVATION] = "activation",
    [TRN_KEY_BACKBONE] = "backbone",
    [TRN_KEY_HEAD] = "head",
};

/* Move the rows of backbone then head out of their lists into spec->rows. */
static int take_rows(struct trn_spec *spec, const char *file, char *err, size_t cap)
{
    size_t total = 0;
    for (int k = TRN_KEY_BACKBONE; k <= TRN_KEY_HEAD; k++) {
        const struct trn_val *l = &spec->key[k];
        if (!spec->present[k])
            return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s: missing key '%s'", file,
                            key_names[k]);
        if (l->type != TRN_VAL_LIST)
            return trn_fail(err, cap, -TRN_MODEL_ESCHEMA,
                            "%s:%zu: %s must be a list of [from, number, module, args]", file,
                            l->line, key_names[k]);
        total += l->n;
    }
    if (total > TRN_MODEL_MAX_LAYERS)
        return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s: %zu layers (at most %d)", file, total,
                        TRN_MODEL_MAX_LAYERS);
    spec->rows = calloc(total ? total : 1, sizeof *spec->rows);
    if (!spec->rows) return -ENOMEM;
    for (int k = TRN_KEY_BACKBONE; k <= TRN_KEY_HEAD; k++) {
        struct trn_val *l = &spec->key[k];
        for (size_t i = 0; i < l->n; i++) {
            struct trn_val *r = &l->items[i];
            if (r->type != TRN_VAL_LIST || r->n != 4)
                return trn_fail(err, cap, -TRN_MODEL_ESCHEMA,
                                "%s:%zu: layer %zu: a row must be [from, number, module, "
                                "args]",
                                file, r->line, spec->n_rows);
            struct trn_spec_row *row = &spec->rows[spec->n_rows++];
            row->line = r->line;
            /* Steal the four values; the emptied list is freed with the key. */
            row->from = r->items[0];
            row->number = r->items[1];
            row->module = r->items[2];
            row->args = r->items[3];
            free(r->items);
            r->items = NULL;
            r->n = 0;
        }
    }
    return 0;
}

static int read_root(yaml_document_t *doc, const char *file, struct trn_spec *spec, char *err,
                     size_t cap)
{
    const yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s: empty model yaml", file);
    if (root->type != YAML_MAPPING_NODE)
        return trn_fail(err, cap, -TRN_MODEL_ESCHEMA, "%s:%zu: model yaml must be a mapping", file,
                        (size_t)root->start_mark.line + 1);
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) continue;
        const char *ks = (const char *)k->data.scalar.value;
        for (int i = 0; i < TRN_KEY_N; i++) {
            if (strlen(key_names[i]) != k->data.scalar.length || strcmp(ks, key_names[i]) != 0)
                continue;
            trn_val_free(&spec->key[i]); /* a repeated key: the last wins, as in PyYAML */
            const int rc = node_val(doc, v, 0, &spec->key[i], file, err, cap);
            if (rc) return rc;
            spec->present[i] = true;
        }
    }
    return take_rows(spec, file, err, cap);
}

int trn_spec_parse(const char *text, size_t len, const char *file, struct trn_spec *spec, char *err,
                   size_t err_cap)
{
    memset(spec, 0, sizeof *spec);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = parser.error == YAML_MEMORY_ERROR
                 ? -ENOMEM
                 : trn_fail(err, err_cap, -TRN_MODEL_ESYNTAX,
                            "%s:%zu:%zu: YAML syntax error: %s%s%s", file,
                            (size_t)parser.problem_mark.line + 1,
                            (size_t)parser.problem_mark.column + 1,
                            parser.problem ? parser.problem : "malformed",
                            parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    rc = read_root(&doc, file, spec, err, err_cap);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc) trn_spec_free(spec);
    return rc;
}
