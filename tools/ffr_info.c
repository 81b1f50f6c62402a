/*
 * ffr info, ffr ls and ffr cat: what a dataset holds. info reads only the index (row sizes and
 * detection summaries), so it is instant on any dataset size; ls reads records only for the
 * source names of detection samples; cat reads the one record asked for.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "ffr_tool.h"

struct range {
    uint64_t min, max;
};

static void range_add(struct range *r, uint64_t v, int first)
{
    if (first || v < r->min) r->min = v;
    if (first || v > r->max) r->max = v;
}

/* Per-class counts. */
struct class_stat {
    uint64_t labels; /* label rows with this class */
    uint64_t images; /* records with at least one such row */
};

struct info {
    uint64_t bytes;       /* all files, manifest included */
    uint64_t stored;      /* sum of stored_len */
    uint64_t raw;         /* sum of raw_len */
    uint64_t codecs[2];   /* records per codec */
    struct range raw_len; /* raw record sizes */
    struct range stored_len;
    struct range align;
    /* detection only */
    struct class_stat *cls; /* n_cls entries, indexed by class id */
    uint32_t n_cls;
    uint64_t labels;      /* label rows */
    uint64_t backgrounds; /* records with no labels */
    struct range h, w, h0, w0;
};

static int class_reserve(struct info *in, uint32_t n)
{
    if (n <= in->n_cls) return 0;
    struct class_stat *c = realloc(in->cls, (size_t)n * sizeof *c);
    if (!c) return -ENOMEM;
    memset(c + in->n_cls, 0, (size_t)(n - in->n_cls) * sizeof *c);
    in->cls = c;
    in->n_cls = n;
    return 0;
}

/* Gathers everything from the index. Returns FFRT_EXIT_OK or FFRT_EXIT_FAIL (printed). */
static int gather(const struct ffrt_cmd *cmd, const struct ffrt_ds *ds, struct info *in)
{
    memset(in, 0, sizeof *in);
    for (uint32_t k = 0; k < ds->n_shards; k++) {
        struct ffr_shard_info sh;
        ffr_reader_shard(ds->r, k, &sh);
        in->bytes += sh.file_size;
        range_add(&in->align, sh.align, k == 0);
    }
    struct ffr_shard_info sh0;
    struct stat st;
    /* A manifest is a file of its own: count it when the path opened is not shard 0. */
    if (ffr_reader_shard(ds->r, 0, &sh0) == 0 && strcmp(sh0.path, ds->path) != 0 &&
        stat(ds->path, &st) == 0)
        in->bytes += (uint64_t)st.st_size;
    if (ds->is_det && class_reserve(in, ds->n_names) < 0) return ffrt_fail(cmd, "out of memory");
    uint8_t *seen = NULL; /* per class: already counted for this image */
    for (uint64_t i = 0; i < ds->count; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(ds->r, i, &ri);
        in->stored += ri.stored_len;
        in->raw += ri.raw_len;
        in->codecs[ri.codec == FFR_CODEC_ZSTD]++;
        range_add(&in->raw_len, ri.raw_len, i == 0);
        range_add(&in->stored_len, ri.stored_len, i == 0);
        if (!ds->is_det) continue;
        struct det_summary s;
        const int rc = det_summary_decode(ri.summary, ri.summary_len, &s);
        if (rc < 0) {
            char where[600];
            free(seen);
            return ffrt_fail(cmd, "%s: index summary is not a detection summary (%s)",
                             ffrt_where(ds, i, where, sizeof where), ffr_strerror(rc));
        }
        range_add(&in->h, s.h, i == 0);
        range_add(&in->w, s.w, i == 0);
        range_add(&in->h0, s.h0, i == 0);
        range_add(&in->w0, s.w0, i == 0);
        in->labels += s.n_labels;
        if (s.n_labels == 0) in->backgrounds++;
        for (uint32_t j = 0; j < s.n_labels; j++) {
            /* det_summary_decode checked the class is a whole number in [0, 65535]. */
            const uint32_t c = (uint32_t)s.labels[j * 5];
            if (c >= in->n_cls) {
                if (class_reserve(in, c + 1) < 0) {
                    free(seen);
                    return ffrt_fail(cmd, "out of memory");
                }
            }
            in->cls[c].labels++;
        }
        /* Images per class: count each class once per record. */
        if (!seen) seen = calloc(65536, 1);
        if (!seen) return ffrt_fail(cmd, "out of memory");
        for (uint32_t j = 0; j < s.n_labels; j++) {
            const uint32_t c = (uint32_t)s.labels[j * 5];
            if (!seen[c]) in->cls[c].images++;
            seen[c] = 1;
        }
        for (uint32_t j = 0; j < s.n_labels; j++)
            seen[(uint32_t)s.labels[j * 5]] = 0;
    }
    free(seen);
    return FFRT_EXIT_OK;
}

/* Classes worth a row: those the metadata names, and any other that labels use. */
static int class_shown(const struct ffrt_ds *ds, const struct info *in, uint32_t c)
{
    return c < ds->n_names || in->cls[c].labels > 0;
}

static double ratio(const struct info *in)
{
    return in->stored ? (double)in->raw / (double)in->stored : 1.0;
}

static double mean(uint64_t sum, uint64_t n)
{
    return n ? (double)sum / (double)n : 0.0;
}

static void print_text(const struct ffrt_ds *ds, const struct info *in)
{
    char *path = ffrt_text_dup(ds->path, strlen(ds->path), FFRT_TEXT_LINE);
    printf("file:          %s\n", path ? path : "?");
    free(path);
    printf("records:       %" PRIu64 "\n", ds->count);
    printf("shards:        %" PRIu32 "\n", ds->n_shards);
    if (ds->n_shards > 1) {
        for (uint32_t k = 0; k < ds->n_shards; k++) {
            struct ffr_shard_info sh;
            ffr_reader_shard(ds->r, k, &sh);
            const char *name = ffrt_shard_name(ds, k, &sh);
            char *p = ffrt_text_dup(name, strlen(name), FFRT_TEXT_LINE);
            printf("  %5" PRIu32 "  %12" PRIu64 " bytes  %8" PRIu64 " records  %s\n", k,
                   sh.file_size, sh.count, p ? p : "?");
            free(p);
        }
    }
    printf("bytes:         %" PRIu64 "\n", in->bytes);
    printf("stored bytes:  %" PRIu64 "\n", in->stored);
    printf("raw bytes:     %" PRIu64 "\n", in->raw);
    printf("ratio:         %.3f (raw / stored)\n", ratio(in));
    printf("codecs:        raw %" PRIu64 ", zstd %" PRIu64 "\n", in->codecs[0], in->codecs[1]);
    if (ds->count) {
        printf("record size:   min %" PRIu64 ", mean %.1f, max %" PRIu64 " (raw bytes)\n",
               in->raw_len.min, mean(in->raw, ds->count), in->raw_len.max);
        printf("stored size:   min %" PRIu64 ", mean %.1f, max %" PRIu64 " (stored bytes)\n",
               in->stored_len.min, mean(in->stored, ds->count), in->stored_len.max);
    }
    if (in->align.min == in->align.max)
        printf("align:         %" PRIu64 "\n", in->align.min);
    else
        printf("align:         %" PRIu64 "..%" PRIu64 " (differs between shards)\n", in->align.min,
               in->align.max);
    if (ds->encoding) {
        char *e = ffrt_text_dup(ds->encoding, strlen(ds->encoding), FFRT_TEXT_LINE);
        printf("encoding:      %s\n", e ? e : "?");
        free(e);
    }
    if (ds->is_det) {
        uint32_t shown = 0, unnamed = 0;
        for (uint32_t c = 0; c < in->n_cls; c++) {
            shown += (uint32_t)class_shown(ds, in, c);
            unnamed += (uint32_t)(class_shown(ds, in, c) && !ffrt_class_name(ds, c));
        }
        printf("classes:       %" PRIu32 " (%" PRIu32 " without a name in the metadata)\n", shown,
               unnamed);
        printf("  %5s %10s %10s  %s\n", "id", "labels", "images", "name");
        for (uint32_t c = 0; c < in->n_cls; c++) {
            if (!class_shown(ds, in, c)) continue;
            const char *n = ffrt_class_name(ds, c);
            char *name = n ? ffrt_text_dup(n, strlen(n), FFRT_TEXT_LINE) : NULL;
            printf("  %5" PRIu32 " %10" PRIu64 " %10" PRIu64 "  %s\n", c, in->cls[c].labels,
                   in->cls[c].images, name ? name : "(no name)");
            free(name);
        }
        printf("labels:        %" PRIu64 "\n", in->labels);
        printf("backgrounds:   %" PRIu64 " (images with no labels)\n", in->backgrounds);
        if (ds->count)
            printf("image size:    h %" PRIu64 "..%" PRIu64 ", w %" PRIu64 "..%" PRIu64
                   " (stored); h0 %" PRIu64 "..%" PRIu64 ", w0 %" PRIu64 "..%" PRIu64
                   " (original)\n",
                   in->h.min, in->h.max, in->w.min, in->w.max, in->h0.min, in->h0.max, in->w0.min,
                   in->w0.max);
    }
    printf("metadata:      %zu bytes\n", ds->meta_len);
    char *meta = ffrt_text_dup(ds->meta, ds->meta_len, FFRT_TEXT_LINES);
    if (meta) {
        /* Indented so the text cannot be mistaken for the fields above. */
        for (const char *line = meta; *line;) {
            const char *nl = strchr(line, '\n');
            const int len = (int)(nl ? nl - line : (long)strlen(line));
            printf("  %.*s\n", len, line);
            line += len + (nl ? 1 : 0);
        }
    }
    free(meta);
}

static cJSON *json_range(const struct range *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "min", (double)r->min);
    cJSON_AddNumberToObject(o, "max", (double)r->max);
    return o;
}

static cJSON *json_text(const char *s, size_t n)
{
    char *t = ffrt_text_dup(s, n, FFRT_TEXT_JSON);
    cJSON *j = t ? cJSON_CreateString(t) : NULL;
    free(t);
    return j ? j : cJSON_CreateNull();
}

static int print_json(const struct ffrt_cmd *cmd, const struct ffrt_ds *ds, const struct info *in)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "file", json_text(ds->path, strlen(ds->path)));
    cJSON_AddNumberToObject(o, "records", (double)ds->count);
    cJSON_AddNumberToObject(o, "shards", ds->n_shards);
    cJSON_AddNumberToObject(o, "bytes", (double)in->bytes);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)in->stored);
    cJSON_AddNumberToObject(o, "raw_bytes", (double)in->raw);
    cJSON_AddNumberToObject(o, "ratio", round(ratio(in) * 1000.0) / 1000.0);
    cJSON *codecs = cJSON_AddObjectToObject(o, "codecs");
    cJSON_AddNumberToObject(codecs, "raw", (double)in->codecs[0]);
    cJSON_AddNumberToObject(codecs, "zstd", (double)in->codecs[1]);
    cJSON *rb = json_range(&in->raw_len);
    cJSON_AddNumberToObject(rb, "mean", mean(in->raw, ds->count));
    cJSON_AddItemToObject(o, "record_bytes", rb);
    cJSON *sb = json_range(&in->stored_len);
    cJSON_AddNumberToObject(sb, "mean", mean(in->stored, ds->count));
    cJSON_AddItemToObject(o, "stored_record_bytes", sb);
    cJSON_AddNumberToObject(o, "align", (double)in->align.max);
    cJSON *files = cJSON_AddArrayToObject(o, "files");
    for (uint32_t k = 0; k < ds->n_shards; k++) {
        struct ffr_shard_info sh;
        ffr_reader_shard(ds->r, k, &sh);
        cJSON *f = cJSON_CreateObject();
        const char *name = ffrt_shard_name(ds, k, &sh);
        cJSON_AddItemToObject(f, "path", json_text(name, strlen(name)));
        cJSON_AddNumberToObject(f, "bytes", (double)sh.file_size);
        cJSON_AddNumberToObject(f, "records", (double)sh.count);
        cJSON_AddNumberToObject(f, "first", (double)sh.first);
        cJSON_AddNumberToObject(f, "align", sh.align);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddItemToObject(o, "encoding",
                          ds->encoding ? json_text(ds->encoding, strlen(ds->encoding))
                                       : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "detection", ds->is_det);
    cJSON *classes = cJSON_AddArrayToObject(o, "classes");
    for (uint32_t c = 0; ds->is_det && c < in->n_cls; c++) {
        if (!class_shown(ds, in, c)) continue;
        cJSON *e = cJSON_CreateObject();
        const char *n = ffrt_class_name(ds, c);
        cJSON_AddNumberToObject(e, "id", c);
        cJSON_AddItemToObject(e, "name", n ? json_text(n, strlen(n)) : cJSON_CreateNull());
        cJSON_AddNumberToObject(e, "labels", (double)in->cls[c].labels);
        cJSON_AddNumberToObject(e, "images", (double)in->cls[c].images);
        cJSON_AddItemToArray(classes, e);
    }
    if (ds->is_det) {
        cJSON_AddNumberToObject(o, "labels", (double)in->labels);
        cJSON_AddNumberToObject(o, "backgrounds", (double)in->backgrounds);
        cJSON *sz = cJSON_AddObjectToObject(o, "image_size");
        cJSON_AddItemToObject(sz, "h", json_range(&in->h));
        cJSON_AddItemToObject(sz, "w", json_range(&in->w));
        cJSON_AddItemToObject(sz, "h0", json_range(&in->h0));
        cJSON_AddItemToObject(sz, "w0", json_range(&in->w0));
    } else {
        cJSON_AddNullToObject(o, "labels");
        cJSON_AddNullToObject(o, "backgrounds");
        cJSON_AddNullToObject(o, "image_size");
    }
    cJSON_AddItemToObject(o, "metadata", json_text(ds->meta, ds->meta_len));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return ffrt_fail(cmd, "out of memory");
    puts(text);
    cJSON_free(text);
    return FFRT_EXIT_OK;
}

int ffrt_cmd_info(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    int json = 0;
    const struct ffrt_opt opts[] = { { "json", 0, &json, NULL }, { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 1, 1, &a);
    if (rc != FFRT_PROCEED) return rc;
    struct ffrt_ds ds;
    if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) return rc;
    struct info in;
    rc = gather(cmd, &ds, &in);
    if (rc == FFRT_EXIT_OK) {
        if (json)
            rc = print_json(cmd, &ds, &in);
        else
            print_text(&ds, &in);
    }
    free(in.cls);
    ffrt_ds_close(&ds);
    if (rc == FFRT_EXIT_OK && fflush(stdout) != 0)
        rc = ffrt_fail(cmd, "writing to stdout: %s", strerror(errno));
    return rc;
}

int ffrt_cmd_ls(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    const char *limit_text = NULL;
    const struct ffrt_opt opts[] = { { "limit", 'n', NULL, &limit_text }, { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 1, 1, &a);
    if (rc != FFRT_PROCEED) return rc;
    uint64_t limit = UINT64_MAX;
    if (limit_text && (rc = ffrt_parse_count(cmd, "--limit", limit_text, &limit)) != FFRT_PROCEED)
        return rc;
    struct ffrt_ds ds;
    if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) return rc;
    printf("# %7s %5s %12s %10s %10s %-5s%s\n", "record", "shard", "offset", "stored", "raw",
           "codec", ds.is_det ? "      HxW  labels  name" : "");
    int bad = 0;
    for (uint64_t i = 0; i < ds.count && i < limit; i++) {
        struct ffr_record_info ri;
        ffr_reader_info(ds.r, i, &ri);
        printf("%9" PRIu64 " %5" PRIu32 " %12" PRIu64 " %10" PRIu32 " %10" PRIu32 " %-5s", i,
               ri.shard, ri.offset, ri.stored_len, ri.raw_len,
               ri.codec == FFR_CODEC_ZSTD ? "zstd" : "raw");
        if (ds.is_det) {
            struct det_summary s;
            struct det_sample smp;
            char hw[32] = "?";
            char nl[16] = "?";
            if (det_summary_decode(ri.summary, ri.summary_len, &s) == 0) {
                snprintf(hw, sizeof hw, "%" PRIu32 "x%" PRIu32, s.h, s.w);
                snprintf(nl, sizeof nl, "%" PRIu32, s.n_labels);
            }
            char *name = NULL;
            /* The source name is only in the record; a bad record is reported and skipped. */
            if (ffrt_ds_read_det(cmd, &ds, i, &smp) == FFRT_EXIT_OK)
                name = ffrt_text_dup(smp.name, smp.name_len, FFRT_TEXT_LINE);
            else
                bad = 1;
            printf(" %9s %7s  %s", hw, nl, !name ? "?" : name[0] ? name : "(no name)");
            free(name);
        }
        putchar('\n');
    }
    ffrt_ds_close(&ds);
    if (fflush(stdout) != 0) return ffrt_fail(cmd, "writing to stdout: %s", strerror(errno));
    return bad ? FFRT_EXIT_FAIL : FFRT_EXIT_OK;
}

int ffrt_cmd_cat(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    struct ffrt_args a;
    const struct ffrt_opt opts[] = { { NULL, 0, NULL, NULL } };
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 2, 2, &a);
    if (rc != FFRT_PROCEED) return rc;
    struct ffrt_ds ds;
    if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) return rc;
    uint64_t i;
    rc = ffrt_record_arg(cmd, &ds, a.pos[1], &i);
    if (rc == FFRT_PROCEED) {
        const uint8_t *data;
        const int64_t n = ffrt_ds_read(cmd, &ds, i, &data);
        rc = FFRT_EXIT_FAIL;
        if (n >= 0) {
            const int w = ffrt_write_all(stdout, data, (size_t)n);
            if (w < 0 || fflush(stdout) != 0)
                ffrt_fail(cmd, "writing to stdout: %s", strerror(w < 0 ? -w : errno));
            else
                rc = FFRT_EXIT_OK;
        }
    }
    ffrt_ds_close(&ds);
    return rc;
}
