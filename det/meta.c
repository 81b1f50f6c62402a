/*
 * The detection dataset's metadata (docs/format.md 8.3): its one writer and its one reader.
 *
 * Contract:
 *   - det_meta_write(m) parses back (det_meta_parse) into an equal m; the text is a function of m
 *     alone (no time, no host, no thread count), so that the same input packs to the same bytes;
 *   - the reader uses libyaml's document loader, which keeps one node per anchor: an alias costs
 *     a pointer, not a copy. What we copy out (the names) is bounded in count (DET_CLASS_MAX + 1),
 *     in each length (DET_NAME_MAX) and in total (DET_NAMES_BYTES_MAX), so a metadata block whose
 *     5,000 aliases name one 200 KB scalar is refused after 80 copies, not expanded to 1 GB;
 *   - every other key is a number or a short string, read with strict parsing: a key that is
 *     there but malformed is an error naming the key, not a silent default.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "det.h"

static const char *const interp_names[] = {
    [DET_INTERP_UNKNOWN] = "",
    [DET_INTERP_LINEAR] = "linear",
    [DET_INTERP_AREA] = "area",
    [DET_INTERP_TRAIN] = "linear (train)",
    [DET_INTERP_VAL] = "area when shrinking, linear when enlarging (val)",
};
static const char *const codec_names[] = { "", "raw", "zstd", "jpeg" };
static const char *const format_names[] = { "", "yolo", "coco" };

const char *det_interp_name(enum det_interp i)
{
    return (unsigned)i < sizeof interp_names / sizeof *interp_names ? interp_names[i] : "";
}

/* ---- writer ---------------------------------------------------------------------------- */

static void quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static const char *yes(bool b)
{
    return b ? "true" : "false";
}

int det_meta_write(const struct det_meta *m, char **out, size_t *len)
{
    if (!m || !out || !len || m->n_names > DET_CLASS_MAX + 1 ||
        (unsigned)m->codec > DET_CODEC_JPEG || (unsigned)m->format > DET_FORMAT_COCO ||
        (unsigned)m->interp > DET_INTERP_VAL)
        return -EINVAL;
    *out = NULL;
    size_t total = 0;
    for (uint32_t k = 0; k < m->n_names; k++) {
        const size_t l = m->names[k] ? strlen(m->names[k]) : 0;
        if (l > DET_NAME_MAX) return -EINVAL;
        total += l;
    }
    if (total > DET_NAMES_BYTES_MAX) return -EINVAL;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return -ENOMEM;
    fprintf(f, "encoding: " DET_ENCODING "\nnc: %" PRIu32 "\nnames:\n", m->n_names);
    for (uint32_t k = 0; k < m->n_names; k++) {
        fprintf(f, "  - ");
        quoted(f, m->names[k]);
        fputc('\n', f);
    }
    fprintf(f, "size: %" PRIu32 "\nsplit: ", m->size);
    quoted(f, m->split);
    fprintf(f, "\nformat: %s\n", format_names[m->format]);
    fprintf(f, "interp: %s\n", interp_names[m->interp]);
    fprintf(f, "resize_round: %s\n", m->round == DET_ROUND_CEIL ? "ceil" : "int");
    fprintf(f, "codec: %s\n", codec_names[m->codec]);
    if (m->codec == DET_CODEC_ZSTD)
        fprintf(f, "zstd_level: %d\nfilter: %s\n", m->zstd_level, m->sub_filter ? "sub" : "none");
    if (m->codec == DET_CODEC_JPEG) fprintf(f, "jpeg_quality: %d\n", m->jpeg_quality);
    fprintf(f, "source: ");
    quoted(f, m->source);
    const struct det_counts *c = &m->counts;
    fprintf(f,
            "\ncounts:\n  found: %" PRIu64 "\n  packed: %" PRIu64 "\n  backgrounds: %" PRIu64
            "\n  corrupt_skipped: %" PRIu64 "\n  missing_skipped: %" PRIu64 "\n  restored: %" PRIu64
            "\n  label_rows: %" PRIu64 "\n  label_rows_dropped: %" PRIu64
            "\n  crowd_skipped: %" PRIu64 "\n",
            c->found, c->packed, c->backgrounds, c->corrupt_skipped, c->missing_skipped,
            c->restored, c->label_rows, c->label_rows_dropped, c->crowd_skipped);
    fprintf(f, "packer:\n  program: yolo-pack\n  version: ");
    /* a version is written plain when it is one ("1.2.3"), else quoted, so that it reads back
     * as written (a plain scalar loses its edge spaces, ':' or '#' would end it, and a leading
     * '-' alone would open a sequence) */
    const char *v = m->packer_version ? m->packer_version : "";
    if (v[0] && v[0] != '-' &&
        strspn(v, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+-_") ==
            strlen(v))
        fprintf(f, "%s", v);
    else
        quoted(f, v);
    fputc('\n', f);
    fprintf(f, "  drop_backgrounds: %s\n  segments: %s\n  boxes_from_segments: %s\n",
            yes(m->drop_backgrounds), yes(m->segments), yes(m->boxes_from_segments));
    if (fclose(f) != 0) {
        free(text);
        return -ENOMEM;
    }
    *out = text;
    return 0;
}

/* ---- reader ---------------------------------------------------------------------------- */

struct rd {
    yaml_document_t *doc;
    struct det_meta *m;
    size_t names_bytes;
    char *why;
    size_t why_cap;
    size_t names_cap; /* slots allocated in m->names: grown by doubling, so that 65,536 names
                         cost O(n), not one realloc each */
};

__attribute__((format(printf, 3, 4))) static int bad(struct rd *d, int rc, const char *fmt, ...)
{
    if (d->why && d->why_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->why, d->why_cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static const yaml_node_t *node(const struct rd *d, int id)
{
    return yaml_document_get_node(d->doc, id);
}

static bool is(const yaml_node_t *n, const char *s)
{
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == strlen(s) &&
           memcmp(n->data.scalar.value, s, n->data.scalar.length) == 0;
}

/* A scalar as a C string, or NULL when v is no scalar or holds a NUL (escaped "\0"). */
static char *dup_scalar(const yaml_node_t *v)
{
    if (!v || v->type != YAML_SCALAR_NODE) return NULL;
    const char *s = (const char *)v->data.scalar.value;
    const size_t n = v->data.scalar.length;
    if (memchr(s, '\0', n)) return NULL;
    return strndup(s, n);
}

/* A whole number in [0, max], written in decimal digits only. */
static int number(struct rd *d, const char *key, const yaml_node_t *v, uint64_t max, uint64_t *out)
{
    if (!v || v->type != YAML_SCALAR_NODE || v->data.scalar.length == 0 ||
        v->data.scalar.length > 20)
        return bad(d, -FFR_ECORRUPT, "metadata %s: not a whole number", key);
    uint64_t x = 0;
    for (size_t i = 0; i < v->data.scalar.length; i++) {
        const unsigned c = v->data.scalar.value[i] - '0';
        if (c > 9 || x > (UINT64_MAX - c) / 10)
            return bad(d, -FFR_ECORRUPT, "metadata %s: not a whole number", key);
        x = x * 10 + c;
    }
    if (x > max)
        return bad(d, -FFR_ECORRUPT, "metadata %s: %" PRIu64 " is over %" PRIu64, key, x, max);
    *out = x;
    return 0;
}

/* An int within +-2^20, with an optional minus (zstd's fast levels are negative). */
static int small_int(struct rd *d, const char *key, const yaml_node_t *v, int *out)
{
    const bool neg = v && v->type == YAML_SCALAR_NODE && v->data.scalar.length > 1 &&
                     v->data.scalar.value[0] == '-';
    yaml_node_t digits;
    if (neg) {
        digits = *v;
        digits.data.scalar.value++;
        digits.data.scalar.length--;
    }
    uint64_t x;
    const int rc = number(d, key, neg ? &digits : v, 1u << 20, &x);
    if (rc == 0) *out = neg ? -(int)x : (int)x;
    return rc;
}

static int text(struct rd *d, const char *key, const yaml_node_t *v, char **out)
{
    if (v && v->type == YAML_SCALAR_NODE && v->data.scalar.length > DET_NAME_MAX)
        return bad(d, -FFR_ECORRUPT, "metadata %s: over %u bytes", key, DET_NAME_MAX);
    char *s = dup_scalar(v);
    if (!s) return bad(d, -FFR_ECORRUPT, "metadata %s: not a string", key);
    free(*out);
    *out = s;
    return 0;
}

static int boolean(struct rd *d, const char *key, const yaml_node_t *v, bool *out)
{
    if (is(v, "true") || is(v, "false")) {
        *out = is(v, "true");
        return 0;
    }
    return bad(d, -FFR_ECORRUPT, "metadata %s: not true or false", key);
}

/* One of names[] (index = value), as the writer spells it. */
static int word(struct rd *d, const char *key, const yaml_node_t *v, const char *const *names,
                int n, int *out)
{
    for (int k = 1; k < n; k++)
        if (is(v, names[k])) {
            *out = k;
            return 0;
        }
    /* a value this reader does not know is UNKNOWN, as format.md 8.3 lets writers add values */
    if (v && v->type == YAML_SCALAR_NODE) {
        *out = 0;
        return 0;
    }
    return bad(d, -FFR_ECORRUPT, "metadata %s: not a string", key);
}

static int set_name(struct rd *d, uint64_t k, const yaml_node_t *v)
{
    struct det_meta *m = d->m;
    if (k > DET_CLASS_MAX)
        return bad(d, -FFR_ECORRUPT, "metadata names: class %" PRIu64 " is over %u", k,
                   DET_CLASS_MAX);
    if (!v || v->type != YAML_SCALAR_NODE)
        return bad(d, -FFR_ECORRUPT, "metadata names: class %" PRIu64 " is not a string", k);
    const size_t l = v->data.scalar.length;
    if (l > DET_NAME_MAX)
        return bad(d, -FFR_ECORRUPT, "metadata names: class %" PRIu64 "'s name is over %u bytes", k,
                   DET_NAME_MAX);
    if ((d->names_bytes += l) > DET_NAMES_BYTES_MAX)
        return bad(d, -FFR_ECORRUPT, "metadata names: over %u bytes in all", DET_NAMES_BYTES_MAX);
    if (k >= d->names_cap) {
        size_t cap = d->names_cap ? 2 * d->names_cap : 64;
        if (cap < k + 1) cap = k + 1;
        if (cap > DET_CLASS_MAX + 1) cap = DET_CLASS_MAX + 1;
        char **g = realloc(m->names, cap * sizeof *g);
        if (!g) return -ENOMEM;
        memset(g + d->names_cap, 0, (cap - d->names_cap) * sizeof *g);
        m->names = g;
        d->names_cap = cap;
    }
    if (k >= m->n_names) m->n_names = (uint32_t)(k + 1);
    char *s = dup_scalar(v);
    if (!s)
        return memchr(v->data.scalar.value, '\0', l)
                   ? bad(d, -FFR_ECORRUPT, "metadata names: class %" PRIu64 " holds a NUL byte", k)
                   : -ENOMEM;
    free(m->names[k]);
    m->names[k] = s;
    return 0;
}

/* names: a list in class order, or ultralytics' {id: name} mapping (keys that are no whole
 * number are not classes and are passed over, as ultralytics' yaml_load leaves them). */
static int read_names(struct rd *d, const yaml_node_t *v)
{
    int rc = 0;
    if (v->type == YAML_SEQUENCE_NODE) {
        uint64_t k = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start;
             it < v->data.sequence.items.top && rc == 0; it++, k++)
            rc = set_name(d, k, node(d, *it));
    } else if (v->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
             p < v->data.mapping.pairs.top && rc == 0; p++) {
            const yaml_node_t *key = node(d, p->key);
            uint64_t k;
            char scratch[8];
            struct rd quiet = {
                .doc = d->doc, .m = d->m, .why = scratch, .why_cap = sizeof scratch
            };
            if (number(&quiet, "", key, UINT64_MAX, &k) == 0)
                rc = set_name(d, k, node(d, p->value));
        }
    } else if (v->type != YAML_SCALAR_NODE || v->data.scalar.length) {
        rc = bad(d, -FFR_ECORRUPT, "metadata names: neither a list nor a mapping");
    }
    return rc;
}

static int read_counts(struct rd *d, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return bad(d, -FFR_ECORRUPT, "metadata counts: not a mapping");
    struct det_counts *c = &d->m->counts;
    static const char *const keys[] = {
        "found",    "packed",     "backgrounds",        "corrupt_skipped", "missing_skipped",
        "restored", "label_rows", "label_rows_dropped", "crowd_skipped"
    };
    uint64_t *const dst[] = { &c->found,           &c->packed,
                              &c->backgrounds,     &c->corrupt_skipped,
                              &c->missing_skipped, &c->restored,
                              &c->label_rows,      &c->label_rows_dropped,
                              &c->crowd_skipped };
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++)
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (is(node(d, p->key), keys[k])) {
                char name[32];
                snprintf(name, sizeof name, "counts.%s", keys[k]);
                const int rc = number(d, name, node(d, p->value), UINT64_MAX, dst[k]);
                if (rc < 0) return rc;
            }
    return 0;
}

static int read_packer(struct rd *d, const yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return bad(d, -FFR_ECORRUPT, "metadata packer: not a mapping");
    struct det_meta *m = d->m;
    int rc = 0;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
         p < v->data.mapping.pairs.top && rc == 0; p++) {
        const yaml_node_t *k = node(d, p->key), *x = node(d, p->value);
        if (is(k, "version"))
            rc = text(d, "packer.version", x, &m->packer_version);
        else if (is(k, "drop_backgrounds"))
            rc = boolean(d, "packer.drop_backgrounds", x, &m->drop_backgrounds);
        else if (is(k, "segments"))
            rc = boolean(d, "packer.segments", x, &m->segments);
        else if (is(k, "boxes_from_segments"))
            rc = boolean(d, "packer.boxes_from_segments", x, &m->boxes_from_segments);
    }
    return rc;
}

static int read_key(struct rd *d, const yaml_node_t *k, const yaml_node_t *v)
{
    struct det_meta *m = d->m;
    uint64_t x;
    int rc = 0, e = 0;
    if (is(k, "encoding")) {
        rc = text(d, "encoding", v, &m->encoding);
        m->is_det = rc == 0 && !strcmp(m->encoding, DET_ENCODING);
    } else if (is(k, "nc")) {
        if ((rc = number(d, "nc", v, DET_CLASS_MAX + 1, &x)) == 0) m->nc = (uint32_t)x;
    } else if (is(k, "names")) {
        rc = read_names(d, v);
    } else if (is(k, "size")) {
        if ((rc = number(d, "size", v, DET_SIDE_MAX, &x)) == 0) m->size = (uint32_t)x;
    } else if (is(k, "split")) {
        rc = text(d, "split", v, &m->split);
    } else if (is(k, "source")) {
        rc = text(d, "source", v, &m->source);
    } else if (is(k, "format")) {
        if ((rc = word(d, "format", v, format_names, 3, &e)) == 0) m->format = e;
    } else if (is(k, "interp")) {
        if ((rc = word(d, "interp", v, interp_names, 5, &e)) == 0) m->interp = e;
    } else if (is(k, "resize_round")) {
        static const char *const r[] = { "", "int", "ceil" };
        if ((rc = word(d, "resize_round", v, r, 3, &e)) == 0) m->round = e;
    } else if (is(k, "codec")) {
        if ((rc = word(d, "codec", v, codec_names, 4, &e)) == 0) m->codec = e;
    } else if (is(k, "zstd_level")) {
        rc = small_int(d, "zstd_level", v, &m->zstd_level);
    } else if (is(k, "jpeg_quality")) {
        rc = small_int(d, "jpeg_quality", v, &m->jpeg_quality);
    } else if (is(k, "filter")) {
        m->sub_filter = is(v, "sub");
    } else if (is(k, "counts")) {
        rc = read_counts(d, v);
    } else if (is(k, "packer")) {
        rc = read_packer(d, v);
    }
    return rc;
}

int det_meta_parse(const char *text_, size_t len, struct det_meta *out, char *why, size_t why_cap)
{
    if (why && why_cap) why[0] = '\0';
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!text_ || len == 0) return 0;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return -ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)text_, len);
    struct rd d = { .doc = &doc, .m = out, .why = why, .why_cap = why_cap };
    int rc = 0;
    if (!yaml_parser_load(&p, &doc)) {
        rc = p.error == YAML_MEMORY_ERROR
                 ? -ENOMEM
                 : bad(&d, -FFR_ECORRUPT, "metadata is not YAML (line %zu: %s)",
                       p.problem_mark.line + 1, p.problem ? p.problem : "?");
        yaml_parser_delete(&p);
        return rc;
    }
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type == YAML_MAPPING_NODE)
        for (yaml_node_pair_t *q = root->data.mapping.pairs.start;
             q < root->data.mapping.pairs.top && rc == 0; q++) {
            const yaml_node_t *v = node(&d, q->value);
            if (v) rc = read_key(&d, node(&d, q->key), v);
        }
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    if (rc < 0) det_meta_free(out);
    return rc;
}

void det_meta_free(struct det_meta *m)
{
    if (!m) return;
    for (uint32_t k = 0; k < m->n_names; k++)
        free(m->names[k]);
    free(m->names);
    free(m->encoding);
    free(m->split);
    free(m->source);
    free(m->packer_version);
    memset(m, 0, sizeof *m);
}
