/*
 * ffr verify: ffr_reader_verify_all checks every byte of every file; for detection datasets a
 * second pass decodes each record that passed and compares it with its index summary, since
 * planning (mosaic partners, batching, class counts) trusts the summaries without reading
 * records. That second pass reads every record again: verify is a thorough check, not a fast one.
 * A URL (http(s):// or s3://) is fetched whole into a temporary node cache first (ffr_cache:
 * each shard is checked byte for byte as it arrives, as --cache-dir does), the copy is verified
 * as a local dataset is, and the temporary folder is removed.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ffr_tool.h"

/* One problem as reported (copied: the library's strings live only during the callback). */
struct vproblem {
    uint32_t shard;
    char *path;
    int64_t record; /* -1: a file structure, not a record */
    uint64_t offset;
    char *what;
};

struct vstate {
    const struct ffrt_ds *ds;
    int json, quiet;
    uint64_t limit;        /* problems to print or list; UINT64_MAX: all */
    uint64_t n;            /* problems found */
    struct vproblem first; /* the lowest-numbered bad record, else the first problem */
    int have_first;
    struct vproblem *shown; /* the first `limit` problems (JSON only) */
    uint64_t n_shown;
    uint8_t *bad; /* bitmap: records that verify_all already reported */
    int oom;
};

/* The library's messages often start with "record N: "; the line already says which record. */
static const char *strip_record_prefix(const char *what, int64_t record)
{
    char prefix[40];
    const int n = snprintf(prefix, sizeof prefix, "record %" PRId64 ": ", record);
    if (record >= 0 && strncmp(what, prefix, (size_t)n) == 0) return what + n;
    return what;
}

static void vproblem_free(struct vproblem *p)
{
    free(p->path);
    free(p->what);
}

static int vproblem_copy(struct vproblem *dst, const struct ffr_problem *p)
{
    const char *what = strip_record_prefix(p->what ? p->what : ffr_strerror(p->code), p->record);
    dst->shard = p->shard;
    dst->record = p->record;
    dst->offset = p->offset;
    dst->path = ffrt_text_dup(p->path, strlen(p->path), FFRT_TEXT_LINE);
    dst->what = ffrt_text_dup(what, strlen(what), FFRT_TEXT_LINE);
    return dst->path && dst->what ? 0 : -ENOMEM;
}

static void on_problem(void *ctx, const struct ffr_problem *p)
{
    struct vstate *v = ctx;
    v->n++;
    if (p->record >= 0 && (uint64_t)p->record < v->ds->count)
        v->bad[(uint64_t)p->record / 8] |= (uint8_t)(1u << (p->record % 8));
    if (!v->have_first ||
        (p->record >= 0 && (v->first.record < 0 || p->record < v->first.record))) {
        vproblem_free(&v->first);
        if (vproblem_copy(&v->first, p) < 0) v->oom = 1;
        v->have_first = 1;
    }
    if (v->n > v->limit) return;
    if (v->json) {
        struct vproblem *q = &v->shown[v->n_shown++];
        if (vproblem_copy(q, p) < 0) v->oom = 1;
        return;
    }
    if (v->quiet) return;
    char *path = ffrt_text_dup(p->path, strlen(p->path), FFRT_TEXT_LINE);
    const char *what = strip_record_prefix(p->what ? p->what : ffr_strerror(p->code), p->record);
    if (p->record >= 0)
        printf("bad: shard %" PRIu32 " (%s), record %" PRId64 ", offset %" PRIu64 ": %s\n",
               p->shard, path ? path : "?", p->record, p->offset, what);
    else
        printf("bad: shard %" PRIu32 " (%s), offset %" PRIu64 ": %s\n", p->shard, path ? path : "?",
               p->offset, what);
    free(path);
}

/* Reports a detection-level problem with record i, as if the library had found it. */
static void det_problem(struct vstate *v, uint64_t i, int code, const char *what)
{
    struct ffr_record_info ri;
    struct ffr_shard_info sh;
    ffr_reader_info(v->ds->r, i, &ri);
    ffr_reader_shard(v->ds->r, ri.shard, &sh);
    const struct ffr_problem p = {
        .shard = ri.shard,
        .path = ffrt_shard_name(v->ds, ri.shard, &sh),
        .record = (int64_t)i,
        .offset = ri.offset,
        .code = code,
        .what = what,
    };
    on_problem(v, &p);
}

/* Compares a sample with its index summary; writes the first difference into what. */
static int summary_differs(const struct det_summary *s, const struct det_sample *d, char *what,
                           size_t cap)
{
    const uint32_t sv[4] = { s->h, s->w, s->h0, s->w0 };
    const uint32_t dv[4] = { d->h, d->w, d->h0, d->w0 };
    static const char *const names[4] = { "h", "w", "h0", "w0" };
    for (int k = 0; k < 4; k++)
        if (sv[k] != dv[k]) {
            snprintf(what, cap, "index summary says %s %" PRIu32 ", the sample %" PRIu32, names[k],
                     sv[k], dv[k]);
            return 1;
        }
    if (s->n_labels != d->n_labels) {
        snprintf(what, cap, "index summary has %" PRIu32 " labels, the sample %" PRIu32,
                 s->n_labels, d->n_labels);
        return 1;
    }
    for (uint32_t j = 0; j < s->n_labels; j++)
        if (memcmp(s->labels + 5 * j, d->labels + 5 * j, 5 * sizeof(float)) != 0) {
            snprintf(what, cap, "label row %" PRIu32 " differs between index summary and sample",
                     j);
            return 1;
        }
    return 0;
}

/* The detection pass over the records that verify_all found intact. */
static int det_pass(struct vstate *v, struct ffrt_ds *ds)
{
    char what[256];
    for (uint64_t i = 0; i < ds->count; i++) {
        if (v->bad[i / 8] & (1u << (i % 8))) continue;
        struct ffr_record_info ri;
        ffr_reader_info(ds->r, i, &ri);
        if ((size_t)ri.raw_len + 1 > ds->cap) {
            free(ds->buf);
            ds->cap = 0;
            if (!(ds->buf = malloc((size_t)ri.raw_len + 1))) return -ENOMEM;
            ds->cap = (size_t)ri.raw_len + 1;
        }
        const int64_t n = ffr_reader_read(ds->r, ds->dec, i, ds->buf, ds->cap);
        if (n < 0) {
            snprintf(what, sizeof what, "reading it again: %s", ffr_strerror((int)n));
            det_problem(v, i, (int)n, what);
            continue;
        }
        struct det_sample d;
        struct det_summary s;
        int rc = det_decode(ds->buf, (size_t)n, &d);
        if (rc < 0) {
            snprintf(what, sizeof what, "not a valid detection sample: %s", ffrt_det_strerror(rc));
            det_problem(v, i, rc, what);
            continue;
        }
        rc = det_summary_decode(ri.summary, ri.summary_len, &s);
        if (rc < 0) {
            snprintf(what, sizeof what, "index summary is not a detection summary: %s",
                     ffr_strerror(rc));
            det_problem(v, i, rc, what);
        } else if (summary_differs(&s, &d, what, sizeof what)) {
            det_problem(v, i, -FFR_ECORRUPT, what);
        } else {
            /* what the loaders refuse, verify refuses: the one shared check */
            char why[200];
            if ((rc = det_check(&d, why, sizeof why)) < 0) {
                snprintf(what, sizeof what, "a sample training refuses: %s", why);
                det_problem(v, i, rc, what);
            }
        }
    }
    return 0;
}

static cJSON *json_problem(const struct vproblem *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "shard", p->shard);
    cJSON_AddStringToObject(o, "file", p->path ? p->path : "");
    if (p->record >= 0)
        cJSON_AddNumberToObject(o, "record", (double)p->record);
    else
        cJSON_AddNullToObject(o, "record");
    cJSON_AddNumberToObject(o, "offset", (double)p->offset);
    cJSON_AddStringToObject(o, "what", p->what ? p->what : "");
    return o;
}

static void print_json(const struct vstate *v, const char *error)
{
    cJSON *o = cJSON_CreateObject();
    char *file = ffrt_text_dup(v->ds->path, strlen(v->ds->path), FFRT_TEXT_JSON);
    cJSON_AddStringToObject(o, "file", file ? file : "");
    free(file);
    cJSON_AddBoolToObject(o, "ok", !error && v->n == 0);
    if (error) {
        cJSON_AddNullToObject(o, "records");
        cJSON_AddNullToObject(o, "problems");
        cJSON_AddNullToObject(o, "first");
        char *e = ffrt_text_dup(error, strlen(error), FFRT_TEXT_JSON);
        cJSON_AddStringToObject(o, "error", e ? e : "");
        free(e);
    } else {
        cJSON_AddNumberToObject(o, "records", (double)v->ds->count);
        cJSON_AddNumberToObject(o, "shards", v->ds->n_shards);
        cJSON_AddBoolToObject(o, "detection", v->ds->is_det);
        cJSON_AddNumberToObject(o, "problems", (double)v->n);
        cJSON_AddItemToObject(o, "first",
                              v->have_first ? json_problem(&v->first) : cJSON_CreateNull());
        cJSON *list = cJSON_AddArrayToObject(o, "list");
        for (uint64_t k = 0; k < v->n_shown; k++)
            cJSON_AddItemToArray(list, json_problem(&v->shown[k]));
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text) puts(text);
    cJSON_free(text);
}

static void print_summary(const struct vstate *v)
{
    if (v->n == 0) {
        if (!v->quiet)
            printf("ok: %" PRIu64 " records in %" PRIu32 " file%s, every byte checked%s\n",
                   v->ds->count, v->ds->n_shards, v->ds->n_shards == 1 ? "" : "s",
                   v->ds->is_det ? "; every detection sample matches its index summary" : "");
        return;
    }
    if (!v->quiet && v->n > v->limit)
        printf("(%" PRIu64 " more problems not shown; --limit 0 shows all)\n", v->n - v->limit);
    const struct vproblem *f = &v->first;
    if (f->record >= 0)
        printf("first bad record %" PRId64 " in shard %" PRIu32 " (%s)\n", f->record, f->shard,
               f->path ? f->path : "?");
    else
        printf("first problem in shard %" PRIu32 " (%s) at offset %" PRIu64 ": %s\n", f->shard,
               f->path ? f->path : "?", f->offset, f->what ? f->what : "?");
    printf("%" PRIu64 " problem%s\n", v->n, v->n == 1 ? "" : "s");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path) < 0 ? -1 : 0;
}

/* Fetches url into a new folder under $TMPDIR (its name into tmp) through a node cache
 * (ffio_cache_dataset), which checks each shard completely as it arrives; the cached manifest's
 * path into local. */
static int fetch_copy(const struct ffrt_cmd *cmd, const char *url, int quiet, char *tmp,
                      size_t tcap, char *local, size_t lcap)
{
    const char *td = getenv("TMPDIR");
    snprintf(tmp, tcap, "%s/ffr-verify-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmp)) {
        const int e = errno;
        const int rc = ffrt_fail(cmd, "%s: %s", tmp, strerror(e));
        tmp[0] = '\0';
        return rc;
    }
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.durable = 0; /* a scratch copy, removed at the end */
    char err[2048] = "";
    const int rc = ffio_cache_dataset(tmp, &co, url, local, lcap, err, sizeof err);
    if (rc < 0) /* the cache's and the client's messages name the URL already */
        return !strncmp(err, url, strlen(url))
                   ? ffrt_fail(cmd, "%s", err)
                   : ffrt_fail(cmd, "%s: %s", url, err[0] ? err : ffr_strerror(rc));
    if (!quiet)
        fprintf(stderr,
                "ffr verify: %s: %d file(s) fetched into %s, each checked byte for byte as it "
                "arrived\n",
                url, rc, tmp);
    return FFRT_EXIT_OK;
}

int ffrt_cmd_verify(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    int json = 0, quiet = 0;
    const char *limit_text = NULL;
    const struct ffrt_opt opts[] = { { "json", 0, &json, NULL },
                                     { "quiet", 'q', &quiet, NULL },
                                     { "limit", 0, NULL, &limit_text },
                                     { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 1, 1, &a);
    if (rc != FFRT_PROCEED) return rc;
    uint64_t limit = 20;
    if (limit_text && (rc = ffrt_parse_count(cmd, "--limit", limit_text, &limit)) != FFRT_PROCEED)
        return rc;
    if (limit == 0) limit = UINT64_MAX;

    struct vstate v = { 0 };
    struct ffrt_ds ds;
    v.ds = &ds;
    v.json = json;
    v.quiet = quiet;
    v.limit = limit;
    char tmp[PATH_MAX] = "", local[4096];
    const char *path = a.pos[0];
    if (ffio_http_is_url(path)) {
        if (fetch_copy(cmd, path, quiet || json, tmp, sizeof tmp, local, sizeof local) !=
            FFRT_EXIT_OK) {
            if (tmp[0]) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            if (json) {
                memset(&ds, 0, sizeof ds);
                ds.path = a.pos[0];
                print_json(&v, "cannot fetch (see stderr)");
            }
            return FFRT_EXIT_FAIL;
        }
        path = local;
    }
    if (ffrt_ds_open(cmd, &ds, path) != FFRT_EXIT_OK) {
        if (tmp[0]) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (json) {
            ds.path = a.pos[0];
            print_json(&v, "cannot open (see stderr)");
        }
        return FFRT_EXIT_FAIL;
    }
    ds.path = a.pos[0]; /* messages name what the user asked for */
    v.bad = calloc((size_t)(ds.count / 8 + 1), 1);
    /* JSON lists at most 1000 problems whatever the limit: the count says how many there were. */
    if (json) v.limit = limit < 1000 ? limit : 1000;
    if (json) v.shown = calloc((size_t)v.limit, sizeof *v.shown);
    if (!v.bad || (json && !v.shown)) {
        rc = ffrt_fail(cmd, "out of memory");
        goto out;
    }
    const int64_t n = ffr_reader_verify_all(ds.r, on_problem, &v);
    if (n < 0) {
        rc = ffrt_fail(cmd, "%s: reading: %s", ds.path, ffr_strerror((int)n));
        if (json) print_json(&v, ffr_strerror((int)n));
        goto out;
    }
    if (ds.is_det && det_pass(&v, &ds) < 0) {
        rc = ffrt_fail(cmd, "out of memory");
        goto out;
    }
    if (v.oom) {
        rc = ffrt_fail(cmd, "out of memory");
        goto out;
    }
    if (json)
        print_json(&v, NULL);
    else
        print_summary(&v);
    rc = v.n == 0 ? FFRT_EXIT_OK : FFRT_EXIT_FAIL;
    if (fflush(stdout) != 0) rc = ffrt_fail(cmd, "writing to stdout: %s", strerror(errno));
out:
    for (uint64_t k = 0; k < v.n_shown; k++)
        vproblem_free(&v.shown[k]);
    free(v.shown);
    vproblem_free(&v.first);
    free(v.bad);
    ffrt_ds_close(&ds);
    if (tmp[0]) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
