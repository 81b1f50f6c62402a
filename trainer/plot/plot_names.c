/* Class names from a dataset's metadata (plots.h), made printable for cairo. */
#include "priv/draw.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0)
        k = 2, cp = s[0] & 0x1Fu;
    else if ((s[0] & 0xF0) == 0xE0)
        k = 3, cp = s[0] & 0x0Fu;
    else if ((s[0] & 0xF8) == 0xF0)
        k = 4, cp = s[0] & 0x07u;
    else
        return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* A printable copy: cairo stops drawing on invalid UTF-8, and control bytes would garble. */
static char *printable_dup(const unsigned char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_len(s + i, n - i);
        if (k == 0 || (k == 1 && (s[i] < 0x20 || s[i] == 0x7F))) {
            d[o++] = '?';
            i++;
        } else {
            memcpy(d + o, s + i, k);
            o += k;
            i += k;
        }
    }
    d[o] = '\0';
    return d;
}

/* Store name v at class k, growing the table. Classes above 65535 are not ffr-det-1's. */
static int names_set(struct trn_plot_names *o, long k, const yaml_node_t *v)
{
    if (k < 0 || k > 65535 || !v || v->type != YAML_SCALAR_NODE) return 0;
    if (k >= o->n) {
        char **g = realloc(o->names, (size_t)(k + 1) * sizeof *g);
        if (!g) return -ENOMEM;
        for (long j = o->n; j <= k; j++)
            g[j] = NULL;
        o->names = g;
        o->n = (int)(k + 1);
    }
    free(o->names[k]);
    o->names[k] = printable_dup(v->data.scalar.value, v->data.scalar.length);
    return o->names[k] ? 0 : -ENOMEM;
}

static int names_read(struct trn_plot_names *o, yaml_document_t *doc, const yaml_node_t *v)
{
    if (v->type == YAML_SEQUENCE_NODE) {
        long j = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++, j++) {
            const int rc = names_set(o, j, yaml_document_get_node(doc, *it));
            if (rc < 0) return rc;
        }
    } else if (v->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
                k->data.scalar.length > 6)
                continue;
            char num[8], *end;
            memcpy(num, k->data.scalar.value, k->data.scalar.length);
            num[k->data.scalar.length] = '\0';
            const long id = strtol(num, &end, 10);
            if (*end) continue;
            const int rc = names_set(o, id, yaml_document_get_node(doc, p->value));
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int trn_plot_names_parse(const char *meta, size_t len, struct trn_plot_names *out)
{
    if (!out) return -EINVAL;
    out->names = NULL;
    out->n = 0;
    if (!meta || len == 0) return 0;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return -ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)meta, len);
    int rc = 0;
    if (yaml_parser_load(&p, &doc)) {
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE)
            for (yaml_node_pair_t *q = root->data.mapping.pairs.start;
                 q < root->data.mapping.pairs.top && rc == 0; q++) {
                const yaml_node_t *v = yaml_document_get_node(&doc, q->value);
                if (v && trn_yaml_scalar_is(yaml_document_get_node(&doc, q->key), "names"))
                    rc = names_read(out, &doc, v);
            }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&p);
    if (rc < 0) trn_plot_names_free(out);
    return rc;
}

void trn_plot_names_free(struct trn_plot_names *names)
{
    if (!names) return;
    for (int k = 0; k < names->n; k++)
        free(names->names[k]);
    free(names->names);
    names->names = NULL;
    names->n = 0;
}
