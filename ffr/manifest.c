/*
 * Manifest parsing with libyaml's document API: the manifest is small (a line per shard field),
 * so a document tree is simpler than events and its size is capped at FFR_MANIFEST_MAX.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "ffr_internal.h"
#include "ffr_manifest.h"

int ffr_manifest_sniff(const uint8_t *head, size_t n)
{
    static const char a[] = "# ffr manifest", b[] = "ffr_manifest:";
    return (n >= sizeof a - 1 && memcmp(head, a, sizeof a - 1) == 0) ||
           (n >= sizeof b - 1 && memcmp(head, b, sizeof b - 1) == 0);
}

static const char *scalar(yaml_document_t *doc, yaml_node_t *n)
{
    (void)doc;
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const char *k = scalar(doc, yaml_document_get_node(doc, p->key));
        if (k && strcmp(k, key) == 0) return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

/* Parses a whole decimal number (docs/format.md 7); rejects signs, spaces and overflow. */
static int get_u64(yaml_document_t *doc, yaml_node_t *map, const char *key, uint64_t *out)
{
    const char *s = scalar(doc, get(doc, map, key));
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Parses an index hash: "0x" and exactly 16 hex digits. */
static int get_hash(yaml_document_t *doc, yaml_node_t *map, const char *key, uint64_t *out)
{
    const char *s = scalar(doc, get(doc, map, key));
    if (!s || strlen(s) != 18 || s[0] != '0' || s[1] != 'x') return -1;
    for (int i = 2; i < 18; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i])) return -1;
    *out = (uint64_t)strtoull(s + 2, NULL, 16);
    return 0;
}

/* Shard names are plain file names beside the manifest (docs/format.md 7): no directory part,
 * so a manifest cannot reach outside its directory, and nothing that needs YAML escapes. */
static int safe_name(const char *f)
{
    if (!*f || strlen(f) > 255 || !strcmp(f, ".") || !strcmp(f, "..")) return 0;
    for (const char *p = f; *p; p++)
        if ((unsigned char)*p < 0x20 || strchr("/\"\\'#", *p)) return 0;
    return 1;
}

void ffr_manifest_free(struct ffr_manifest *m)
{
    if (!m) return;
    for (uint32_t k = 0; k < m->n_shards; k++)
        free(m->shards[k].file);
    free(m->shards);
    memset(m, 0, sizeof *m);
}

int ffr_manifest_parse(struct ffr_manifest *m, const uint8_t *text, size_t len, char *err,
                       size_t err_cap)
{
    memset(m, 0, sizeof *m);
    if (len > FFR_MANIFEST_MAX)
        return ffr_say(err, err_cap, -FFR_ETOOBIG, "manifest larger than %u bytes",
                       FFR_MANIFEST_MAX);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return -ENOMEM;
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        const int rc =
            ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest is not valid YAML: %s (line %zu)",
                    parser.problem ? parser.problem : "parse error", parser.problem_mark.line + 1);
        yaml_parser_delete(&parser);
        return rc;
    }
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    uint64_t version = 0;
    if (!root || root->type != YAML_MAPPING_NODE || get_u64(&doc, root, "ffr_manifest", &version)) {
        rc = ffr_say(err, err_cap, -FFR_EBADMAGIC, "not an ffr manifest (no ffr_manifest: key)");
        goto out;
    }
    if (version != 1) {
        rc = ffr_say(err, err_cap, -FFR_EVERSION,
                     "manifest version %" PRIu64 "; this reader knows 1", version);
        goto out;
    }
    yaml_node_t *shards = get(&doc, root, "shards");
    if (get_u64(&doc, root, "records", &m->records) || !shards ||
        shards->type != YAML_SEQUENCE_NODE) {
        rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest lacks records: or a shards: list");
        goto out;
    }
    const ptrdiff_t n = shards->data.sequence.items.top - shards->data.sequence.items.start;
    if (n <= 0 || (uint64_t)n > FFR_MANIFEST_MAX_SHARDS) {
        rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest has %td shards", n);
        goto out;
    }
    m->shards = calloc((size_t)n, sizeof *m->shards);
    if (!m->shards) {
        rc = -ENOMEM;
        goto out;
    }
    for (ptrdiff_t k = 0; k < n; k++) {
        yaml_node_t *e = yaml_document_get_node(&doc, shards->data.sequence.items.start[k]);
        struct ffr_manifest_shard *s = &m->shards[k];
        const char *file = scalar(&doc, get(&doc, e, "file"));
        if (!file || !safe_name(file) || get_u64(&doc, e, "bytes", &s->bytes) ||
            get_u64(&doc, e, "records", &s->records) ||
            get_hash(&doc, e, "index_hash", &s->index_hash)) {
            rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                         "manifest shard entry %td lacks a safe file:, bytes:, records: or "
                         "index_hash:",
                         k);
            goto out;
        }
        if (!(s->file = strdup(file))) {
            rc = -ENOMEM;
            goto out;
        }
        m->n_shards = (uint32_t)k + 1;
    }
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc < 0) ffr_manifest_free(m);
    return rc;
}
