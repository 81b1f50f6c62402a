/*
 * Ultralytics dataset yaml (data/coco128.yaml form), read with libyaml's document API, which keeps
 * an alias as a reference to its anchor. What we copy out is bounded all the same, because a copy
 * per alias is where a hostile file blows up: 5,000 aliases of one 200 KB scalar are 1 GB of
 * copies from a 215 KB file. So every string copied counts against PACK_DSYAML_COPY_MAX, a name
 * is at most DET_NAME_MAX bytes and a path PACK_DSYAML_PATH_MAX, and nc and the names are at most
 * DET_CLASS_MAX + 1 (what a detection sample holds); each refusal names the file, line and key.
 * We read only the top-level mapping:
 *   path: dataset root (str; null = absent)
 *   train / val / test: str, or list of str (directories or image list files)
 *   names: list of names, or a mapping {int: name} whose keys are exactly 0..n-1
 *   nc: int; must equal the number of names when both are given
 * Other keys (download, ...) are ignored. Scalars are taken as written (a name "1" stays "1").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "dataset_internal.h"

static const char *const split_keys[PACK_DSYAML_NSPLIT] = { "train", "val", "test" };

int pack_dsyaml_split_index(const char *name)
{
    for (int i = 0; i < PACK_DSYAML_NSPLIT; i++)
        if (strcmp(name, split_keys[i]) == 0) return i;
    return -1;
}

void pack_dsyaml_free(struct pack_dsyaml *y)
{
    free(y->path);
    for (int s = 0; s < PACK_DSYAML_NSPLIT; s++) {
        for (size_t i = 0; i < y->n_split[s]; i++)
            free(y->split[s][i]);
        free(y->split[s]);
    }
    for (size_t i = 0; i < y->n_names; i++)
        free(y->names[i]);
    free(y->names);
    memset(y, 0, sizeof *y);
    y->nc = -1;
}

static const char *scalar(const yaml_node_t *n, size_t *len)
{
    *len = n->data.scalar.length;
    return (const char *)n->data.scalar.value;
}

/* YAML 1.1 null: a plain "", "~" or "null" in its three spellings. */
static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    size_t l;
    const char *s = scalar(n, &l);
    return l == 0 || (l == 1 && s[0] == '~') ||
           (l == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

/* A copy of scalar n into *out, counted against the file's copy budget; what names the key in
 * messages (line: n's). Refuses a NUL byte, a string over max bytes and a spent budget. */
static int copy_scalar(struct pack_dsyaml *y, const yaml_node_t *n, size_t max, const char *what,
                       const char *file, char *err, size_t cap, char **out)
{
    size_t l;
    const char *s = scalar(n, &l);
    const size_t line = n->start_mark.line + 1;
    if (memchr(s, '\0', l))
        return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: %s holds a NUL byte", file, line,
                         what);
    if (l > max)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: %s is %zu bytes, over %zu", file,
                         line, what, l, max);
    if ((y->copied += l) > PACK_DSYAML_COPY_MAX)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                         "%s:%zu: the yaml's strings exceed %u MiB with its aliases expanded", file,
                         line, PACK_DSYAML_COPY_MAX >> 20);
    *out = strndup(s, l);
    return *out ? 0 : -ENOMEM;
}

/* A plain decimal integer scalar (as PyYAML reads "12"), in [0, 2^31). */
static int scalar_int(const yaml_node_t *n, int64_t *out)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return -1;
    size_t l;
    const char *s = scalar(n, &l);
    if (l == 0 || l > 10) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < l; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX) return -1;
    *out = v;
    return 0;
}

static int add_str(struct pack_dsyaml *y, char ***v, size_t *n, const yaml_node_t *node, size_t max,
                   const char *what, const char *file, char *err, size_t cap)
{
    char *s;
    const int rc = copy_scalar(y, node, max, what, file, err, cap, &s);
    if (rc) return rc;
    char **nv = realloc(*v, (*n + 1) * sizeof **v);
    if (!nv) {
        free(s);
        return -ENOMEM;
    }
    *v = nv;
    (*v)[(*n)++] = s;
    return 0;
}

static int read_names(yaml_document_t *doc, const yaml_node_t *v, const char *file,
                      struct pack_dsyaml *y, char *err, size_t cap)
{
    const size_t line = v->start_mark.line + 1;
    const size_t n_items = v->type == YAML_SEQUENCE_NODE
                               ? (size_t)(v->data.sequence.items.top - v->data.sequence.items.start)
                           : v->type == YAML_MAPPING_NODE
                               ? (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start)
                               : 0;
    if (n_items > DET_CLASS_MAX + 1)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                         "%s:%zu: names has %zu entries; a dataset holds at most %u classes", file,
                         line, n_items, DET_CLASS_MAX + 1);
    if (v->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++) {
            const yaml_node_t *e = yaml_document_get_node(doc, *it);
            if (!e || e->type != YAML_SCALAR_NODE)
                return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                                 "%s:%zu: names: entries must be scalars", file, line);
            int rc = add_str(y, &y->names, &y->n_names, e, DET_NAME_MAX, "a name", file, err, cap);
            if (rc) return rc;
        }
        if (!y->names) y->names = calloc(1, sizeof *y->names); /* "names: []" is zero classes */
        return y->names ? 0 : -ENOMEM;
    }
    if (v->type != YAML_MAPPING_NODE)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: names must be a list or a mapping",
                         file, line);
    const size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    y->names = calloc(n ? n : 1, sizeof *y->names);
    if (!y->names) return -ENOMEM;
    y->n_names = n;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *e = yaml_document_get_node(doc, p->value);
        int64_t id;
        if (!k || scalar_int(k, &id) != 0)
            return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                             "%s:%zu: names keys must be integers, i.e. 2: car", file,
                             k ? k->start_mark.line + 1 : line);
        if ((uint64_t)id >= n || y->names[id])
            return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                             "%s:%zu: names keys must be 0..%zu, each once (got %lld)", file,
                             k->start_mark.line + 1, n - 1, (long long)id);
        if (!e || e->type != YAML_SCALAR_NODE)
            return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: names values must be scalars",
                             file, k->start_mark.line + 1);
        const int rc = copy_scalar(y, e, DET_NAME_MAX, "a name", file, err, cap, &y->names[id]);
        if (rc) return rc;
    }
    return 0;
}

static int read_doc(yaml_document_t *doc, const char *file, struct pack_dsyaml *y, char *err,
                    size_t cap)
{
    const yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s: empty dataset yaml", file);
    if (root->type != YAML_MAPPING_NODE)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: dataset yaml must be a mapping", file,
                         root->start_mark.line + 1);
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) continue;
        size_t kl;
        const char *ks = scalar(k, &kl);
        char key[16];
        if (kl >= sizeof key || memchr(ks, '\0', kl)) continue;
        memcpy(key, ks, kl);
        key[kl] = '\0';
        const size_t line = v->start_mark.line + 1;
        const int si = pack_dsyaml_split_index(key);
        if (strcmp(key, "path") == 0) {
            if (is_null(v)) continue;
            if (v->type != YAML_SCALAR_NODE)
                return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: path must be a string", file,
                                 line);
            free(y->path);
            y->path = NULL;
            const int rc =
                copy_scalar(y, v, PACK_DSYAML_PATH_MAX, "path", file, err, cap, &y->path);
            if (rc) return rc;
        } else if (si >= 0) {
            for (size_t i = 0; i < y->n_split[si]; i++)
                free(y->split[si][i]);
            free(y->split[si]);
            y->split[si] = NULL;
            y->n_split[si] = 0;
            if (is_null(v)) continue;
            if (v->type == YAML_SCALAR_NODE) {
                int rc = add_str(y, &y->split[si], &y->n_split[si], v, PACK_DSYAML_PATH_MAX, key,
                                 file, err, cap);
                if (rc) return rc;
            } else if (v->type == YAML_SEQUENCE_NODE) {
                for (yaml_node_item_t *it = v->data.sequence.items.start;
                     it < v->data.sequence.items.top; it++) {
                    const yaml_node_t *e = yaml_document_get_node(doc, *it);
                    if (!e || e->type != YAML_SCALAR_NODE || is_null(e))
                        return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                                         "%s:%zu: %s: entries must be strings", file, line, key);
                    int rc = add_str(y, &y->split[si], &y->n_split[si], e, PACK_DSYAML_PATH_MAX,
                                     key, file, err, cap);
                    if (rc) return rc;
                }
            } else {
                return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                                 "%s:%zu: %s must be a path or a list of paths", file, line, key);
            }
        } else if (strcmp(key, "names") == 0) {
            for (size_t i = 0; i < y->n_names; i++)
                free(y->names[i]);
            free(y->names);
            y->names = NULL;
            y->n_names = 0;
            int rc = read_names(doc, v, file, y, err, cap);
            if (rc) return rc;
        } else if (strcmp(key, "nc") == 0) {
            if (scalar_int(v, &y->nc) != 0)
                return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s:%zu: nc must be an integer", file,
                                 line);
            if (y->nc > (int64_t)DET_CLASS_MAX + 1)
                return pack_errf(err, cap, -PACK_DS_ESCHEMA,
                                 "%s:%zu: nc is %lld; a dataset holds at most %u classes", file,
                                 line, (long long)y->nc, DET_CLASS_MAX + 1);
        }
    }
    if (y->names && y->nc >= 0 && (size_t)y->nc != y->n_names)
        return pack_errf(err, cap, -PACK_DS_ESCHEMA, "%s: names has %zu entries but nc is %lld",
                         file, y->n_names, (long long)y->nc);
    return 0;
}

int pack_dsyaml_parse(const char *buf, size_t len, const char *file, struct pack_dsyaml *out,
                      char *err, size_t err_cap)
{
    memset(out, 0, sizeof *out);
    out->nc = -1;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = parser.error == YAML_MEMORY_ERROR
                 ? -ENOMEM
                 : pack_errf(err, err_cap, -PACK_DS_ESYNTAX, "%s:%zu:%zu: YAML error: %s%s%s", file,
                             parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                             parser.problem ? parser.problem : "malformed",
                             parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        pack_dsyaml_free(out);
        return rc;
    }
    rc = read_doc(&doc, file, out, err, err_cap);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc) pack_dsyaml_free(out);
    return rc;
}
