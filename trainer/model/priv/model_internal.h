/*
 * Internals shared by model_yaml.c (YAML -> a tree of Python-like values, as PyYAML's
 * safe_load would give) and model.c (the parse_model rules over that tree). Not for other
 * modules; tests/trainer may include it.
 */
#ifndef TRN_MODEL_INTERNAL_H
#define TRN_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "util.h"

/* A value as PyYAML's safe_load returns it (YAML 1.1 core types). */
enum trn_val_type {
    TRN_VAL_NONE,  /* null, ~, empty */
    TRN_VAL_BOOL,  /* i = 0 or 1 */
    TRN_VAL_INT,   /* i */
    TRN_VAL_FLOAT, /* f */
    TRN_VAL_STR,   /* s */
    TRN_VAL_LIST,  /* items[0..n) */
    TRN_VAL_MAP,   /* anything else that is a mapping; only the line is kept */
};

struct trn_val {
    enum trn_val_type type;
    int64_t i;             /* BOOL, INT */
    double f;              /* FLOAT */
    char *s;               /* STR: NUL-terminated, owned */
    struct trn_val *items; /* LIST: owned */
    size_t n;              /* LIST: entries */
    size_t line;           /* 1-based line where the value starts */
};

/* One [from, number, module, args] row. */
struct trn_spec_row {
    size_t line;
    struct trn_val from, number, module, args;
};

/* The top level of a model yaml. A key that is absent has present[...] false. */
enum trn_spec_key {
    TRN_KEY_NC,
    TRN_KEY_GD,
    TRN_KEY_GW,
    TRN_KEY_ANCHORS,
    TRN_KEY_CH,
    TRN_KEY_ACTIVATION,
    TRN_KEY_BACKBONE,
    TRN_KEY_HEAD,
    TRN_KEY_N
};

struct trn_spec {
    struct trn_val key[TRN_KEY_N]; /* the value of each key */
    bool present[TRN_KEY_N];
    struct trn_spec_row *rows; /* backbone rows then head rows */
    size_t n_rows;
};

/*
 * Read model yaml text into spec (zeroed first). Checks only the YAML and the row shape (each
 * row a 4-element list; backbone and head lists); model.c checks the rest. Returns 0,
 * -TRN_MODEL_ESYNTAX, -TRN_MODEL_ESCHEMA, -ENOMEM; err gets "file:line: ...".
 */
int trn_spec_parse(const char *text, size_t len, const char *file, struct trn_spec *spec, char *err,
                   size_t err_cap);

/* Free what trn_spec_parse allocated. */
void trn_spec_free(struct trn_spec *spec);

/* Free a value's contents (not v itself). */
void trn_val_free(struct trn_val *v);

/* Deep copy; returns 0 or -ENOMEM. */
int trn_val_copy(struct trn_val *dst, const struct trn_val *src);

/*
 * Append Python's str() of v (ints, floats as repr, True/False/None, 'strings', [a, b]) to the
 * growing string *buf (length *len, capacity *cap; realloc'd). Returns 0 or -ENOMEM.
 */
int trn_val_repr(const struct trn_val *v, char **buf, size_t *len, size_t *cap);

#endif
