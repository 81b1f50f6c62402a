/*
 * Manifest parsing: the line-based subset of YAML that docs/format.md 7 defines, read line by
 * line, not by a YAML library. A YAML parser accepts far more than the subset (flow style,
 * anchors and aliases, repeated keys with the first one winning, tabs as separators, values
 * continued on the next line), and a manifest that one reader takes and another refuses, or
 * reads differently, is a dataset that trains on one machine and not on the next. So this reader
 * and tools/ffr_mini.c, written from the spec apart from each other, accept exactly the same
 * manifests (tests/tools/test_ffr_mini.sh feeds every case to both and compares the verdicts).
 *
 * The grammar, line by line (a line ends at LF; a CR ends its content too): leading spaces; on
 * a line that starts with "- " (after them) a new shard entry begins; an empty line or a '#'
 * comment is skipped; else `key: value` with key in [a-z_]+, value plain (up to a " #" comment,
 * trailing spaces dropped) or in double quotes (no escapes: names hold no '"' or '\'), and
 * nothing but a comment after it. A key with no leading space is a top-level key; others belong
 * to the last entry. Unknown keys are ignored (room for later additions); a known key twice is an
 * error. The first error in line order is the one reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffr_internal.h"
#include "ffr_manifest.h"

/* Longest line content (before its LF): what a 4096-byte line buffer holds with LF and NUL. */
#define LINE_MAX_BYTES 4094u

int ffr_manifest_sniff(const uint8_t *head, size_t n)
{
    static const char a[] = "# ffr manifest", b[] = "ffr_manifest:";
    return (n >= sizeof a - 1 && memcmp(head, a, sizeof a - 1) == 0) ||
           (n >= sizeof b - 1 && memcmp(head, b, sizeof b - 1) == 0);
}

/* Section 7's integers: decimal digits (leading zeros allowed), or for index_hash "0x" and
 * exactly 16 hex digits. -1 when v is not one. */
static int number(const char *v, bool hex, uint64_t *out)
{
    const char *d = v;
    if (hex) {
        if (strncmp(v, "0x", 2) != 0) return -1;
        d += 2;
    }
    const size_t nd = strspn(d, hex ? "0123456789abcdefABCDEF" : "0123456789");
    if (!nd || d[nd] || (hex && nd != 16)) return -1;
    errno = 0;
    const unsigned long long x = strtoull(d, NULL, hex ? 16 : 10);
    if (errno) return -1;
    *out = (uint64_t)x;
    return 0;
}

/* Shard names are plain file names beside the manifest (docs/format.md 7): no directory part,
 * so a manifest cannot reach outside its directory, and nothing that needs YAML escapes. */
static bool safe_name(const char *f)
{
    const size_t n = strlen(f);
    if (!n || n > 255 || !strcmp(f, ".") || !strcmp(f, "..")) return false;
    for (const char *p = f; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || strchr("/\"\\'#", *p)) return false;
    return true;
}

void ffr_manifest_free(struct ffr_manifest *m)
{
    if (!m) return;
    for (uint32_t k = 0; k < m->n_shards; k++)
        free(m->shards[k].file);
    free(m->shards);
    memset(m, 0, sizeof *m);
}

/* Splits one line's content (NUL-terminated, modified) into key and value. Returns 0, 1 for a
 * line to skip, or -1 (not `key: value`; *why set). *entry: the line began a shard entry. */
static int split_line(char *line, char **key, char **val, bool *top, bool *entry, const char **why)
{
    char *k = line + strspn(line, " ");
    *top = k == line;
    *entry = false;
    if (!strncmp(k, "- ", 2)) {
        *entry = true;
        *top = false;
        k += 2 + strspn(k + 2, " ");
    }
    if (!*k || *k == '#') return 1;
    const size_t kl = strspn(k, "abcdefghijklmnopqrstuvwxyz_");
    if (!kl || k[kl] != ':' || (k[kl + 1] && k[kl + 1] != ' ')) {
        *why = "not 'key: value'";
        return -1;
    }
    k[kl] = '\0';
    char *v = k + kl + 1 + strspn(k + kl + 1, " "), *rest;
    if (*v == '"') {
        rest = strchr(++v, '"');
        if (!rest) {
            *why = "unterminated quote";
            return -1;
        }
        *rest++ = '\0';
    } else {
        rest = v;
        while (*rest && !(*rest == '#' && (rest == v || rest[-1] == ' ')))
            rest++;
        char *e = rest;
        while (e > v && e[-1] == ' ')
            e--;
        *e = '\0'; /* a comment right at the value's start is cut with it */
    }
    rest += strspn(rest, " ");
    if (*rest && *rest != '#') {
        *why = "text after the value";
        return -1;
    }
    *key = k;
    *val = v;
    return 0;
}

/* One shard entry as it is read: its fields and which keys it had. */
struct entry {
    char *file;
    uint64_t v[3]; /* bytes, records, index_hash */
    unsigned seen; /* a bit per key of entry_keys */
};

static const char *const entry_keys[4] = { "file", "bytes", "records", "index_hash" };

int ffr_manifest_parse(struct ffr_manifest *m, const uint8_t *text, size_t len, char *err,
                       size_t err_cap)
{
    memset(m, 0, sizeof *m);
    if (len > FFR_MANIFEST_MAX)
        return ffr_say(err, err_cap, -FFR_ETOOBIG, "manifest larger than %u bytes",
                       FFR_MANIFEST_MAX);
    if (memchr(text, '\0', len))
        return ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest holds a NUL byte (not text)");
    struct entry *es = NULL;
    size_t ns = 0, cap = 0;
    uint64_t version = 0, total = 0;
    unsigned top_seen = 0, lineno = 0;
    char line[LINE_MAX_BYTES + 1];
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < len;) {
        const uint8_t *nl = memchr(text + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (end - at > LINE_MAX_BYTES) {
            rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest line %u: too long", lineno);
            break;
        }
        memcpy(line, text + at, end - at);
        line[end - at] = '\0';
        line[strcspn(line, "\r")] = '\0';
        at = end + 1;
        char *key = line, *val = line;
        bool top, entry;
        const char *why = NULL;
        const int s = split_line(line, &key, &val, &top, &entry, &why);
        if (entry) {
            if (!(top_seen & 4)) {
                rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                             "manifest line %u: a shard entry before 'shards:'", lineno);
                break;
            }
            if (ns == cap) {
                cap = cap ? 2 * cap : 16;
                struct entry *g =
                    cap <= FFR_MANIFEST_MAX_SHARDS ? realloc(es, cap * sizeof *g) : NULL;
                if (!g) {
                    rc = cap <= FFR_MANIFEST_MAX_SHARDS
                             ? -ENOMEM
                             : ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest has too many shards");
                    break;
                }
                es = g;
            }
            es[ns++] = (struct entry){ .file = NULL };
        }
        if (s == 1) continue;
        if (s < 0) {
            rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest line %u: %s", lineno, why);
            break;
        }
        if (top) {
            static const char *const top_keys[3] = { "ffr_manifest", "records", "shards" };
            for (unsigned k = 0; rc == 0 && k < 3; k++) {
                if (strcmp(key, top_keys[k]) != 0) continue;
                if (top_seen & 1u << k)
                    rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest line %u: '%s' twice",
                                 lineno, key);
                else if (k == 2 && *val)
                    rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                                 "manifest line %u: 'shards:' takes a block list on the lines "
                                 "below",
                                 lineno);
                else if (k < 2 && number(val, false, k ? &total : &version) < 0)
                    rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                                 "manifest line %u: bad decimal number '%s'", lineno, val);
                else if (k == 0 && version != 1)
                    rc = ffr_say(err, err_cap, -FFR_EVERSION,
                                 "manifest version %" PRIu64 "; this reader knows 1", version);
                top_seen |= 1u << k;
            }
            continue;
        }
        if (!ns) {
            rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                         "manifest line %u: '%s' outside a shard entry", lineno, key);
            break;
        }
        struct entry *e = &es[ns - 1];
        for (unsigned k = 0; rc == 0 && k < 4; k++) {
            if (strcmp(key, entry_keys[k]) != 0) continue;
            if (e->seen & 1u << k)
                rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest line %u: '%s' twice", lineno,
                             key);
            else if (k && number(val, k == 3, &e->v[k - 1]) < 0)
                rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest line %u: bad %s '%s'", lineno,
                             k == 3 ? "0x + 16 hex digit number" : "decimal number", val);
            else if (!k && !safe_name(val))
                rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                             "manifest line %u: '%s' is not a plain file name", lineno, val);
            else if (!k && !(e->file = strdup(val)))
                rc = -ENOMEM;
            e->seen |= 1u << k;
        }
    }
    if (rc == 0 && !(top_seen & 1))
        rc = ffr_say(err, err_cap, -FFR_EBADMAGIC, "not an ffr manifest (no ffr_manifest: key)");
    if (rc == 0 && (!(top_seen & 2) || !ns))
        rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                     "manifest needs 'records:' and at least one shard entry");
    uint64_t sum = 0;
    for (size_t k = 0; rc == 0 && k < ns; k++) {
        if (es[k].seen != 15)
            rc =
                ffr_say(err, err_cap, -FFR_ECORRUPT,
                        "manifest shard entry %zu lacks file:, bytes:, records: or index_hash:", k);
        else if (sum + es[k].v[1] < sum)
            rc = ffr_say(err, err_cap, -FFR_ECORRUPT, "manifest record counts overflow");
        sum += es[k].v[1];
    }
    if (rc == 0 && sum != total)
        rc = ffr_say(err, err_cap, -FFR_ECORRUPT,
                     "manifest says records: %" PRIu64 ", its shards hold %" PRIu64, total, sum);
    if (rc == 0 && !(m->shards = calloc(ns, sizeof *m->shards))) rc = -ENOMEM;
    for (size_t k = 0; k < ns; k++) {
        if (rc == 0) {
            m->shards[k] = (struct ffr_manifest_shard){ .file = es[k].file,
                                                        .bytes = es[k].v[0],
                                                        .records = es[k].v[1],
                                                        .index_hash = es[k].v[2] };
            m->n_shards = (uint32_t)k + 1;
        } else {
            free(es[k].file);
        }
    }
    free(es);
    m->records = total;
    if (rc < 0) ffr_manifest_free(m);
    return rc;
}
