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
#include <sys/stat.h>

#include "ffio.h"

/*
 * Batches outstanding at once (ffio_records_submit): a reader thread keeps the next sample's
 * records in flight while it works on the current one, so a handful is plenty.
 */
#define RR_BATCHES 8

struct rr_batch {
    struct ffio_record_req *reqs; /* the caller's, borrowed until its wait; NULL = free */
    size_t n;
    struct ffr_record_info *info; /* [cap] per request */
    struct ffio_extent *ext;      /* [cap] requests with an extent to read, packed at the front */
    size_t cap;
    size_t m;      /* extents in ext[] */
    size_t next;   /* ext[0, next) handed to the engine */
    size_t landed; /* of those, completed and checked */
    int failed;    /* requests with result < 0 so far */
    uint64_t age;  /* submission order: older batches go to the engine first */
};

struct ffio_records {
    const struct ffr_reader *r;
    struct ffio_engine *e;
    struct ffr_decoder *dec;
    bool verify, decode;
    uint32_t *file_of_shard; /* engine handle per shard */
    struct rr_batch b[RR_BATCHES];
    uint64_t age;
    size_t in_engine; /* extents submitted and not yet returned by ffio_engine_wait */
    struct ffio_completion *comp;
    size_t comp_cap;
    int dead; /* the engine's own error once it failed: every later call returns it */
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
    /* Extents in flight write into caller buffers: let them land before the ring goes. */
    while (rr->in_engine > 0 && rr->dead == 0) {
        const int got = ffio_engine_wait(rr->e, rr->comp, rr->comp_cap, rr->in_engine);
        if (got <= 0) break;
        rr->in_engine -= (size_t)got;
    }
    ffio_engine_destroy(rr->e);
    ffr_decoder_destroy(rr->dec);
    free(rr->file_of_shard);
    for (int i = 0; i < RR_BATCHES; i++) {
        free(rr->b[i].info);
        free(rr->b[i].ext);
    }
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
        /* The file the reader checked, not whatever has its name now: a node cache may have
         * evicted or replaced it since (ffr_reader_swap_shard). /proc reopens the reader's own
         * file, with the engine's flags (O_DIRECT). */
        struct stat a, b;
        char self[64];
        const char *path = si.path;
        if (si.fd >= 0 && fstat(si.fd, &a) == 0 &&
            (stat(si.path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
            snprintf(self, sizeof self, "/proc/self/fd/%d", si.fd);
            path = self;
        }
        const int h = ffio_engine_add_file(rr->e, path);
        if (h < 0)
            rc = h;
        else
            rr->file_of_shard[k] = (uint32_t)h;
    }
    if (rc == 0) {
        struct ffio_engine_info ei;
        ffio_engine_info(rr->e, &ei);
        rr->comp_cap = ei.queue_depth ? ei.queue_depth : 1;
        if (!(rr->comp = calloc(rr->comp_cap, sizeof *rr->comp))) rc = -ENOMEM;
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

static int reserve(struct rr_batch *b, size_t n)
{
    if (n <= b->cap) return 0;
    struct ffr_record_info *i = realloc(b->info, n * sizeof *i);
    if (i) b->info = i;
    struct ffio_extent *x = realloc(b->ext, n * sizeof *x);
    if (x) b->ext = x;
    if (!i || !x) return -ENOMEM;
    b->cap = n;
    return 0;
}

/* Checks and decodes a request whose extent has landed. */
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

/* Hands queued extents to the engine while it has room, oldest batch first. */
static int pump(struct ffio_records *rr)
{
    for (;;) {
        struct rr_batch *o = NULL;
        for (int i = 0; i < RR_BATCHES; i++) {
            struct rr_batch *b = &rr->b[i];
            if (b->reqs && b->next < b->m && (!o || b->age < o->age)) o = b;
        }
        if (!o) return 0;
        const int s = ffio_engine_submit(rr->e, o->ext + o->next, o->m - o->next);
        if (s < 0) return rr->dead = s;
        if (s == 0) return 0; /* the queue is full */
        o->next += (size_t)s;
        rr->in_engine += (size_t)s;
    }
}

/* Waits for at least one completion and checks what landed, whichever batch it belongs to. */
static int reap(struct ffio_records *rr)
{
    if (rr->in_engine == 0) return rr->dead = -EIO; /* never true: pump fed a pending batch */
    const int got = ffio_engine_wait(rr->e, rr->comp, rr->comp_cap, 1);
    if (got < 0) return rr->dead = got;
    rr->in_engine -= (size_t)got;
    for (int i = 0; i < got; i++) {
        const struct ffio_completion *c = &rr->comp[i];
        struct rr_batch *b = &rr->b[c->tag >> 32];
        const size_t k = (size_t)(c->tag & 0xffffffffu);
        struct ffio_record_req *q = &b->reqs[k];
        land(rr, q, &b->info[k], c);
        b->failed += q->result < 0;
        b->landed++;
    }
    return 0;
}

int ffio_records_submit(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n)
{
    if (!rr || !reqs || n == 0 || n > UINT32_MAX) return -EINVAL;
    if (rr->dead) return rr->dead;
    struct rr_batch *b = NULL;
    for (int i = 0; i < RR_BATCHES; i++) {
        if (rr->b[i].reqs == reqs) return -EBUSY; /* still outstanding */
        if (!rr->b[i].reqs && !b) b = &rr->b[i];
    }
    if (!b) return -EBUSY;
    int rc = reserve(b, n);
    if (rc < 0) return rc;
    const uint64_t bi = (uint64_t)(b - rr->b);
    b->m = b->next = b->landed = 0;
    b->failed = 0;
    for (size_t k = 0; k < n; k++) {
        struct ffio_record_req *q = &reqs[k];
        q->payload = NULL;
        q->result = 0;
        struct ffr_record_info *in = &b->info[k];
        if ((rc = ffr_reader_info(rr->r, q->index, in)) < 0) {
            q->result = rc;
            b->failed++;
            continue;
        }
        if (!q->extent || q->extent_cap < in->extent_len) {
            q->result = -FFR_ETOOBIG;
            b->failed++;
            continue;
        }
        if (rr->decode && !q->dst && in->codec != FFR_CODEC_RAW) {
            q->result = -EINVAL;
            b->failed++;
            continue;
        }
        b->ext[b->m++] = (struct ffio_extent){
            .dst = q->extent,
            .offset = in->offset,
            .length = in->extent_len,
            .tag = bi << 32 | k,
            .file = rr->file_of_shard[in->shard],
        };
    }
    b->reqs = reqs;
    b->n = n;
    b->age = rr->age++;
    return pump(rr);
}

int ffio_records_wait(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n)
{
    if (!rr || !reqs) return -EINVAL;
    struct rr_batch *b = NULL;
    for (int i = 0; i < RR_BATCHES && !b; i++)
        if (rr->b[i].reqs == reqs && rr->b[i].n == n) b = &rr->b[i];
    if (!b) return -EINVAL;
    while (rr->dead == 0 && b->landed < b->m) {
        int rc = pump(rr);
        if (rc == 0) rc = reap(rr);
        (void)rc; /* rr->dead says it */
    }
    b->reqs = NULL;
    return rr->dead ? rr->dead : b->failed;
}

int ffio_records_read(struct ffio_records *rr, struct ffio_record_req *reqs, size_t n)
{
    if (!rr || (!reqs && n)) return -EINVAL;
    if (n == 0) return rr->dead;
    const int rc = ffio_records_submit(rr, reqs, n);
    return rc < 0 ? rc : ffio_records_wait(rr, reqs, n);
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
