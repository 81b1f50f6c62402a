/*
 * What every `ffr` command shares: argument parsing, the two kinds of error message (bad
 * arguments: exit 2; bad files: exit 1), opening a dataset and reading its YAML metadata, and
 * reading records with messages that name the file, shard and record.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argparse.h"
#include "ffr_tool.h"

static void vsay(const struct ffrt_cmd *cmd, const char *fmt, va_list ap)
{
    fflush(stdout);
    fprintf(stderr, "ffr %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int ffrt_usage_error(const struct ffrt_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hint: ffr %s --help lists the options\n", cmd->name);
    return FFRT_EXIT_USAGE;
}

int ffrt_fail(const struct ffrt_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(cmd, fmt, ap);
    va_end(ap);
    return FFRT_EXIT_FAIL;
}

/* The command's options as argparse rows (argparse.h): the one parser of every program. Flags
 * land in bools first, then in the command's ints. */
int ffrt_parse_args(const struct ffrt_cmd *cmd, int argc, char **argv, const struct ffrt_opt *opts,
                    int min_pos, int max_pos, struct ffrt_args *out)
{
    memset(out, 0, sizeof *out);
    enum { MAX_OPTS = 32 };
    struct ap_opt ao[MAX_OPTS + 1];
    char names[MAX_OPTS][48];
    bool flags[MAX_OPTS] = { false };
    bool help = false;
    size_t n = 0;
    for (const struct ffrt_opt *o = opts; o && o->name && n < MAX_OPTS; o++, n++) {
        if (o->short_name)
            snprintf(names[n], sizeof names[n], "--%s|-%c", o->name, o->short_name);
        else
            snprintf(names[n], sizeof names[n], "--%s", o->name);
        ao[n] = (struct ap_opt){ .names = names[n],
                                 .kind = o->flag ? AP_FLAG : AP_STR,
                                 .dst = o->flag ? (void *)&flags[n] : (void *)o->value };
    }
    ao[n] = (struct ap_opt){ .names = "-h|--help", .kind = AP_FLAG, .dst = &help };
    char prog[64];
    snprintf(prog, sizeof prog, "ffr %s", cmd->name);
    const struct ap_spec sp = {
        .prog = prog,
        .usage = cmd->usage,
        .opts = ao,
        .n_opts = n + 1,
        .positional = out->pos,
        .max_positional = max_pos < FFRT_MAX_POS ? max_pos : FFRT_MAX_POS,
        .n_positional = &out->n_pos,
    };
    if (ap_parse(&sp, argc, argv)) return FFRT_EXIT_USAGE;
    if (help) {
        /* the command's own prose: it says what each option does in context */
        printf("usage: %s\n\n%s", cmd->usage, cmd->help);
        return FFRT_EXIT_OK;
    }
    n = 0;
    for (const struct ffrt_opt *o = opts; o && o->name && n < MAX_OPTS; o++, n++)
        if (o->flag && flags[n]) *o->flag = 1;
    if (out->n_pos < min_pos) {
        static const char *const what[] = { "FILE", "record number N" };
        return ffrt_usage_error(cmd, "missing %s", what[out->n_pos < 1 ? 0 : 1]);
    }
    return FFRT_PROCEED;
}

int ffrt_parse_count(const struct ffrt_cmd *cmd, const char *opt, const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno)
        return ffrt_usage_error(cmd, "%s wants a whole number >= 0, not '%s'", opt, text);
    *out = v;
    return FFRT_PROCEED;
}

static void parse_metadata(const struct ffrt_cmd *cmd, struct ffrt_ds *ds)
{
    char why[300];
    const int rc = det_meta_parse(ds->meta, ds->meta_len, &ds->dm, why, sizeof why);
    if (rc < 0)
        fprintf(stderr, "ffr %s: %s: warning: %s; records are shown as plain bytes\n", cmd->name,
                ds->path, rc == -ENOMEM ? "out of memory reading the metadata" : why);
    ds->is_det = ds->dm.is_det;
    ds->encoding = ds->dm.encoding;
    ds->names = ds->dm.names;
    ds->n_names = ds->dm.n_names;
}

/* A URL: the remote skeleton's reader, records over HTTP. */
static int ds_open_url(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, const char *path)
{
    char err[2048] = "";
    int rc = ffio_http_create(NULL, &ds->http);
    if (rc < 0)
        return ffrt_fail(cmd, "%s: %s", path,
                         rc == -ENOTSUP ? "this build reads no URLs (built without libcurl)"
                                        : strerror(-rc));
    rc = ffio_remote_open(ds->http, path, NULL, &ds->rm, err, sizeof err);
    if (rc < 0) {
        ffrt_ds_close(ds);
        return ffrt_fail(cmd, "%s", err[0] ? err : ffio_strerror(rc));
    }
    ds->r = ffio_remote_reader(ds->rm);
    return FFRT_EXIT_OK;
}

const char *ffrt_shard_name(const struct ffrt_ds *ds, uint32_t k, const struct ffr_shard_info *sh)
{
    const char *u = ds->rm ? ffio_remote_url(ds->rm, k) : NULL;
    return u ? u : sh->path;
}

int ffrt_ds_open(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, const char *path)
{
    memset(ds, 0, sizeof *ds);
    ds->path = path;
    if (ffio_http_is_url(path)) {
        const int rc = ds_open_url(cmd, ds, path);
        if (rc != FFRT_EXIT_OK) return rc;
    } else {
        char err[512];
        const int rc = ffr_reader_open(&ds->own, path, NULL, err, sizeof err);
        if (rc < 0) return ffrt_fail(cmd, "%s", err[0] ? err : ffr_strerror(rc));
        ds->r = ds->own;
    }
    if (ffr_decoder_create(&ds->dec) < 0) {
        ffrt_ds_close(ds);
        return ffrt_fail(cmd, "out of memory");
    }
    ds->count = ffr_reader_count(ds->r);
    ds->n_shards = ffr_reader_shard_count(ds->r);
    ds->meta = ffr_reader_metadata(ds->r, &ds->meta_len);
    parse_metadata(cmd, ds);
    return FFRT_EXIT_OK;
}

void ffrt_ds_close(struct ffrt_ds *ds)
{
    det_meta_free(&ds->dm);
    free(ds->buf);
    free(ds->ext);
    ffr_decoder_destroy(ds->dec);
    ffr_reader_close(ds->own);
    ffio_remote_close(ds->rm);
    ffio_http_destroy(ds->http);
    memset(ds, 0, sizeof *ds);
}

int ffrt_record_arg(const struct ffrt_cmd *cmd, const struct ffrt_ds *ds, const char *text,
                    uint64_t *out)
{
    char *end;
    errno = 0;
    const long long v = strtoll(text, &end, 10);
    const int digits =
        (text[0] >= '0' && text[0] <= '9') || (text[0] == '-' && text[1] >= '0' && text[1] <= '9');
    if (!digits || *end || errno == ERANGE)
        return ffrt_usage_error(cmd, "record number must be an integer, not '%s'", text);
    const uint64_t n = ds->count;
    if (n == 0) return ffrt_usage_error(cmd, "record %s: %s has no records", text, ds->path);
    if ((v >= 0 && (uint64_t)v >= n) || (v < 0 && (uint64_t)(-(v + 1)) >= n))
        return ffrt_usage_error(cmd,
                                "record %s out of range: %s has %" PRIu64 " records (0..%" PRIu64
                                ", or -%" PRIu64 "..-1 from the end)",
                                text, ds->path, n, n - 1, n);
    *out = v >= 0 ? (uint64_t)v : n - (uint64_t)(-(v + 1)) - 1;
    return FFRT_PROCEED;
}

const char *ffrt_where(const struct ffrt_ds *ds, uint64_t i, char *dst, size_t cap)
{
    struct ffr_record_info info;
    struct ffr_shard_info sh;
    if (ds->n_shards > 1 && ffr_reader_info(ds->r, i, &info) == 0 &&
        ffr_reader_shard(ds->r, info.shard, &sh) == 0)
        snprintf(dst, cap, "%s: shard %" PRIu32 " (%s): record %" PRIu64, ds->path, info.shard,
                 ffrt_shard_name(ds, info.shard, &sh), i);
    else
        snprintf(dst, cap, "%s: record %" PRIu64, ds->path, i);
    return dst;
}

int64_t ffrt_ds_read(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, uint64_t i,
                     const uint8_t **data)
{
    char where[600];
    struct ffr_record_info info;
    int64_t rc = ffr_reader_info(ds->r, i, &info);
    if (rc == 0 && info.raw_len + (size_t)1 > ds->cap) {
        /* +1 so an empty record still gets a non-NULL buffer. */
        free(ds->buf);
        ds->cap = 0;
        ds->buf = malloc((size_t)info.raw_len + 1);
        if (!ds->buf)
            rc = -ENOMEM;
        else
            ds->cap = (size_t)info.raw_len + 1;
    }
    if (rc == 0 && ds->rm) {
        /* One range request for the record's frame, checked and decoded as a local read is. */
        if (info.frame_len > ds->ext_cap) {
            free(ds->ext);
            ds->ext_cap = 0;
            if (!(ds->ext = malloc((size_t)info.frame_len))) rc = -ENOMEM;
            if (ds->ext) ds->ext_cap = (size_t)info.frame_len;
        }
        struct ffio_record_req q = { .index = i,
                                     .extent = ds->ext,
                                     .extent_cap = ds->ext_cap,
                                     .dst = ds->buf,
                                     .dst_cap = ds->cap };
        if (rc == 0) {
            const int bad = ffio_remote_read(ds->rm, &q, 1);
            rc = bad < 0 ? bad : q.result;
        }
        if (rc < 0) {
            const char *why = rc <= -1000 ? ffr_strerror((int)rc) : ffio_strerror((int)rc);
            const char *net = ffio_http_last_error(ds->http);
            ffrt_fail(cmd, "%s: %s%s%s", ffrt_where(ds, i, where, sizeof where), why,
                      net[0] ? ": " : "", net);
            return -1;
        }
    } else if (rc == 0) {
        rc = ffr_reader_read(ds->r, ds->dec, i, ds->buf, ds->cap);
    }
    if (rc < 0) {
        ffrt_fail(cmd, "%s: %s", ffrt_where(ds, i, where, sizeof where), ffr_strerror((int)rc));
        return -1;
    }
    *data = ds->buf;
    return rc;
}

const char *ffrt_det_strerror(int rc)
{
    switch (rc) {
    case -FFR_EBADMAGIC:
        return "no YDET magic";
    case -FFR_EVERSION:
        return "a newer ffr-det version than this tool knows";
    case -FFR_ECORRUPT:
        return "sizes that do not add up, a bad class or non-finite coordinates";
    default:
        return ffr_strerror(rc);
    }
}

int ffrt_ds_read_det(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, uint64_t i,
                     struct det_sample *s)
{
    const uint8_t *data;
    const int64_t n = ffrt_ds_read(cmd, ds, i, &data);
    if (n < 0) return FFRT_EXIT_FAIL;
    const int rc = det_decode(data, (size_t)n, s);
    if (rc < 0) {
        char where[600];
        return ffrt_fail(cmd, "%s: not a valid detection sample (%s)%s",
                         ffrt_where(ds, i, where, sizeof where), ffrt_det_strerror(rc),
                         ds->is_det ? "" : "; the metadata does not say encoding: ffr-det-1");
    }
    return FFRT_EXIT_OK;
}

const char *ffrt_class_name(const struct ffrt_ds *ds, uint32_t c)
{
    return c < ds->n_names ? ds->names[c] : NULL;
}

const char *ffrt_sample_stem(const struct det_sample *s, uint64_t i, char *dst, size_t cap)
{
    const char *name = s->name;
    size_t n = s->name_len;
    for (size_t j = n; j > 0; j--)
        if (name[j - 1] == '/') {
            name += j;
            n -= j;
            break;
        }
    for (size_t j = n; j > 1; j--)
        if (name[j - 1] == '.') {
            n = j - 1;
            break;
        }
    int safe = n > 0 && n < cap && n < 200 && !(n == 1 && name[0] == '.') &&
               !(n == 2 && name[0] == '.' && name[1] == '.');
    for (size_t j = 0; j < n && safe; j++)
        if ((unsigned char)name[j] < 0x20 || name[j] == 0x7f || name[j] == '\\') safe = 0;
    if (safe) {
        memcpy(dst, name, n);
        dst[n] = '\0';
    } else {
        snprintf(dst, cap, "%" PRIu64, i);
    }
    return dst;
}

int ffrt_write_all(FILE *f, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, f) != n) return errno ? -errno : -EIO;
    return ferror(f) ? -EIO : 0;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0 when it is not valid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    const unsigned c = p[0];
    if (c < 0x80) return 1;
    /* Lead byte ranges, their sequence lengths and smallest code points (no overlongs). */
    const size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
    static const unsigned min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (len == 0 || len > n) return 0;
    unsigned cp = c & (0x7fu >> len);
    for (size_t j = 1; j < len; j++) {
        if ((p[j] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[j] & 0x3fu);
    }
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

char *ffrt_text_dup(const char *s, size_t n, int mode)
{
    /* Each input byte becomes at most 3 output bytes (U+FFFD). */
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t j = 0; j < n;) {
        const size_t len = p[j] ? utf8_len(p + j, n - j) : 0;
        if (len == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            j++;
            continue;
        }
        const int control = len == 1 && (p[j] < 0x20 || p[j] == 0x7f);
        const int keep =
            mode == FFRT_TEXT_JSON || (mode == FFRT_TEXT_LINES && (p[j] == '\n' || p[j] == '\t'));
        if (control && !keep) {
            out[o++] = '?';
        } else {
            memcpy(out + o, p + j, len);
            o += len;
        }
        j += len;
    }
    out[o] = '\0';
    return out;
}
