/*
 * Internals shared by the .pt reader's files (ptload.c, pt_zip.c, pt_pickle.c, pt_model.c).
 * Objects built by the pickle machine live in one array and refer to each other by index, so a
 * hostile pickle can share or cycle references without any pointer going stale.
 */
#ifndef TRN_PT_INTERNAL_H
#define TRN_PT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ptload.h"

/* One zip entry. */
struct pt_entry {
    char *name;           /* NUL-terminated, owned */
    uint32_t method;      /* 0 stored, 8 deflate */
    uint32_t crc;         /* CRC-32 from the central directory */
    uint64_t csize;       /* bytes in the file */
    uint64_t usize;       /* bytes once inflated */
    uint64_t data_off;    /* where the data starts in the file */
    const uint8_t *bytes; /* the checked bytes once pt_zip_get has run, else NULL */
    uint64_t kept;        /* bytes of `bytes` held: usize, or the prefix a view needs (DEFLATE) */
    uint8_t *owned;       /* inflated copy (DEFLATE), freed at close */
};

enum pt_kind {
    PT_NONE,
    PT_BOOL,
    PT_INT,
    PT_FLOAT,
    PT_STR,    /* text or bytes: s, len */
    PT_TUPLE,  /* items */
    PT_LIST,   /* items */
    PT_DICT,   /* items: key, value, key, value ... (insertion order) */
    PT_GLOBAL, /* s = "module.name" */
    PT_OBJ,    /* placeholder: a = callable, b = args (or -1), c = state (or -1), items */
    PT_STORAGE,
    PT_TENSOR,
};

/* One object. Containers own their items array. */
struct pt_obj {
    uint8_t kind;     /* enum pt_kind */
    uint8_t param;    /* PT_TENSOR: came through _rebuild_parameter */
    uint8_t dictlike; /* PT_OBJ: received SETITEM(S) (items are pairs) */
    uint8_t listlike; /* PT_OBJ: received APPEND(S) */
    uint32_t n, cap;  /* items used / allocated */
    int32_t *items;   /* object indices */
    int32_t a, b, c;  /* see enum pt_kind */
    int64_t i;        /* PT_BOOL, PT_INT; PT_STORAGE / PT_TENSOR: index in their tables */
    double f;         /* PT_FLOAT */
    const char *s;    /* PT_STR, PT_GLOBAL: not NUL-terminated for PT_STR */
    uint32_t len;     /* bytes of s */
};

struct pt_storage {
    enum trn_pt_dtype dtype;
    char *key;              /* owned */
    int64_t numel;          /* elements */
    struct pt_entry *entry; /* data/<key> */
};

struct pt_tensor_raw {
    int32_t storage; /* index in the storage table */
    int ndim;
    int64_t shape[TRN_PT_MAX_DIMS], stride[TRN_PT_MAX_DIMS];
    int64_t offset;
    int64_t last; /* the largest element index the view reads; -1 when it reads none */
};

struct trn_pt {
    char file_name[128]; /* for messages: the path's last component */
    uint8_t *file;       /* the whole file, owned */
    size_t file_len;
    struct pt_entry *entries; /* sorted by name */
    size_t n_entries;
    char prefix[256];      /* "archive/" */
    const char *pkl_entry; /* name of data.pkl's entry, for messages */

    struct pt_obj *objs;
    uint32_t n_objs, cap_objs;
    struct pt_storage *storages;
    uint32_t n_storages, cap_storages;
    struct pt_tensor_raw *tensors;
    uint32_t n_tensors, cap_tensors;
    char **strings; /* owned strings (global names) */
    uint32_t n_strings, cap_strings;
    int32_t root;                      /* the pickle's result */
    uint64_t steps;                    /* work done, bounded against pathological inputs */
    uint64_t inflate_budget, inflated; /* bytes DEFLATE entries may inflate to, in all; so far */

    /* the last state dict */
    struct trn_pt_tensor *sd;
    int32_t *sd_raw; /* tensor table index of each entry */
    char **sd_names;
    int n_sd, cap_sd;

    char *err;
    size_t err_cap;
};

/* Write "file: message" into pt->err (if any) and return rc. */
int pt_fail(struct trn_pt *pt, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

int pt_zip_parse(struct trn_pt *pt);
struct pt_entry *pt_zip_find(struct trn_pt *pt, const char *name);
/* The checked (CRC) and, if needed, inflated bytes of an entry, at most max bytes. */
int pt_zip_get(struct trn_pt *pt, struct pt_entry *e, uint64_t max, const uint8_t **out);
/* The first `keep` bytes of e, its whole CRC checked; a DEFLATE entry is inflated through a small
 * window and only `keep` bytes are held, its usize counted against pt->inflate_budget. */
int pt_zip_get_prefix(struct trn_pt *pt, struct pt_entry *e, uint64_t keep, const uint8_t **out);

/* Run the pickle; sets pt->root. */
int pt_pickle_run(struct trn_pt *pt, const uint8_t *p, size_t len);

/* Dict lookup by string key (last wins); -1 if absent or d is not a dict. */
int32_t pt_dict_get(const struct trn_pt *pt, int32_t d, const char *key);
/* True if o is a PT_STR equal to s. */
bool pt_str_eq(const struct trn_pt *pt, int32_t o, const char *s);
/* The module placeholder under `which` (see trn_pt_state_dict), or a negative code. */
int32_t pt_resolve(const struct trn_pt *pt, const char *which);
/* The BUILD state dict of a placeholder, or -1. */
int32_t pt_obj_state(const struct trn_pt *pt, int32_t o);

#endif
