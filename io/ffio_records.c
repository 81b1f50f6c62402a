/*
 * ffr records over an ffio engine (ffio.h, last section). The engine moves extents; this file
 * knows just enough of ffr (its public header) to turn record numbers into extents and, as each
 * extent lands, hand it to ffr_frame_decode, which checks the frame and its hash and decodes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffio.h"

struct ffio_records {
    const struct ffr_reader *r;
    struct ffio_engine *e;
    struct ffr_decoder *dec;
    bool verify, decode;
    uint32_t *file_of_shard;      /* engine handle per shard */
    struct ffr_record_info *info; /* per request of the current call */
    struct ffio_extent *ext;
    struct ffio_completion *comp;
    size_t cap;
};

void ffio_records_opts_default(struct ffio_records_opts *o)
{
    memset(o, 0, sizeof *o);
    ffio_opts_default(&o->io);
    o->verify = true;
    o->decode = true;
}

void ffio_records_close(struct ffio_records *rr)
{
    if (!rr) return;
    ffio_engine_destroy(rr->e);
    ffr_decoder_destroy(rr->dec);
    free(rr->file_of_shard);
    free(rr->info);
    free(rr->ext);
    free(rr->comp);
    free(rr);
}

int ffio_records_open(const struct ffr_reader *r, const struct ffio_records_opts *o,
                      struct ffio_records **out)
{
    if (!r || !out) return -EINVAL;
    struct ffio_records_opts def;
    if (!o) {
        ffio_records_opts_default(&def);
        o = &def;
    }
    struct ffio_records *rr = calloc(1, sizeof *rr);
    if (!rr) return -ENOMEM;
    rr->r = r;
    rr->verify = o->verify;
    rr->decode = o->decode;
    const uint32_t ns = ffr_reader_shard_count(r);
    struct ffio_opts io = o->io;
    if (io.max_files < ns) io.max_files = ns;
    int rc = ffio_engine_create(&io, &rr->e);
    if (rc == 0) rc = ffr_decoder_create(&rr->dec);
    if (rc == 0 && !(rr->file_of_shard = calloc(ns ? ns : 1, sizeof *rr->file_of_shard)))
        rc = -ENOMEM;
    for (uint32_t k = 0; rc == 0 && k < ns; k++) {
        struct ffr_shard_info si;
        ffr_reader_shard(r, k, &si);
        const int h = ffio_engine_add_file(rr->e, si.path);
        if (h < 0)
            rc = h;
        else
            rr->file_of_shard[k] = (uint32_t)h;
    }
    if (rc < 0) {
        ffio_records_close(rr);
        return rc;
    }
    *out = rr;
    return 0;
}

struct ffio_engine *ffio_records_engine(struct ffio_records *rr)
{
    return rr ? rr->e : NULL;
}

static int reserve(struct ffio_records *rr, size_t n)
{
    if (n <= rr->cap) return 0;
    struct ffr_record_info *i = realloc(rr->info, n * sizeof *i);
    if (i) rr->info = i;
    struct ffio_extent *x = realloc(rr->ext, n * sizeof *x);
    if (x) rr->ext = x;
    struct ffio_completion *c = realloc(rr->comp, n * sizeof *c);
    if (c) rr->comp = c;
    if (!i || !x || !c) return -ENOMEM;
    rr->cap = n;
    return 0;
}

/* Checks and decodes request k whose extent has landed. */
static void land(struct ffio_records *rr, struct ffio_record_req *q,
                 const struct ffr_record_info *in, const struct ffio_completion *c)
{
    if (c->res < 0) {
        q->result = c->res;
        return;
    }
    const void *payload = NULL;
    const int64_t n = ffr_frame_decode(rr->dec, in, q->extent, (size_t)c->done, rr->verify,
                                       rr->decode ? q->dst : NULL, q->dst_cap, &payload);
    q->result = n;
    if (n >= 0) q->payload = rr->decode && q->dst ? q->dst : payload;
}

int ffio_records_read(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n)
{
    if (!rr || (!reqs && n)) return -EINVAL;
    int rc = reserve(rr, n);
    if (rc < 0) return rc;
    size_t m = 0; /* requests with an extent to read, packed at the front of ext[] */
    int failed = 0;
    for (size_t k = 0; k < n; k++) {
        struct ffio_record_req *q = &reqs[k];
        q->payload = NULL;
        q->result = 0;
        struct ffr_record_info *in = &rr->info[k];
        if ((rc = ffr_reader_info(rr->r, q->index, in)) < 0) {
            q->result = rc;
            failed++;
            continue;
        }
        if (!q->extent || q->extent_cap < in->extent_len) {
            q->result = -FFR_ETOOBIG;
            failed++;
            continue;
        }
        if (rr->decode && !q->dst && in->codec != FFR_CODEC_RAW) {
            q->result = -EINVAL;
            failed++;
            continue;
        }
        rr->ext[m++] = (struct ffio_extent){
            .dst = q->extent,
            .offset = in->offset,
            .length = in->extent_len,
            .tag = k,
            .file = rr->file_of_shard[in->shard],
        };
    }
    size_t next = 0, landed = 0;
    while (landed < m) {
        if (next < m) {
            const int s = ffio_engine_submit(rr->e, rr->ext + next, m - next);
            if (s < 0) return s;
            next += (size_t)s;
        }
        const int got = ffio_engine_wait(rr->e, rr->comp, rr->cap, 1);
        if (got < 0) return got;
        for (int i = 0; i < got; i++) {
            const struct ffio_completion *c = &rr->comp[i];
            struct ffio_record_req *q = &reqs[c->tag];
            land(rr, q, &rr->info[c->tag], c);
            failed += q->result < 0;
        }
        landed += (size_t)got;
    }
    return failed;
}

int ffio_records_describe(const struct ffio_records *rr, const struct ffio_record_req *req,
                          char *buf, size_t cap)
{
    if (!rr || !req || !buf) return -EINVAL;
    struct ffr_record_info in;
    if (ffr_reader_info(rr->r, req->index, &in) < 0)
        return snprintf(buf, cap, "record %" PRIu64 ": no such record", req->index);
    struct ffr_shard_info si;
    ffr_reader_shard(rr->r, in.shard, &si);
    const int rc = (int)req->result;
    const char *why = rc == -ENODATA ? "file ends inside the record"
                      : rc <= -1000  ? ffr_strerror(rc)
                                     : ffio_strerror(rc);
    return snprintf(buf, cap, "%s: shard %u record %" PRIu64 " (offset %" PRIu64 "): %s", si.path,
                    in.shard, req->index, in.offset, why);
}
