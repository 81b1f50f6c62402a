/*
 * Round trips: random records of random sizes (0 bytes to several MiB), compressible and not,
 * raw and zstd, several alignments, one file and sharded; read back by number through
 * ffr_reader_read, through ffr_frame_decode on a caller-read extent, and from several threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>

#include "ffr.h"
#include "tap.h"
#include "testutil.h"

struct rec {
    uint8_t *data;
    size_t len;
    uint8_t summary[40];
    size_t summary_len;
};

static size_t draw_size(uint64_t *s)
{
    switch (tu_below(s, 6)) {
    case 0:
        return 0;
    case 1:
        return (size_t)tu_below(s, 16);
    case 2:
        return (size_t)tu_below(s, 5000);
    case 3:
        return 4096 - 32 + (size_t)tu_below(s, 3) - 1; /* frames ending at and across a page */
    case 4:
        return (size_t)tu_below(s, 300000);
    default:
        return (1u << 20) + (size_t)tu_below(s, 3u << 20); /* 1 to 4 MiB */
    }
}

static struct rec *make_records(uint64_t seed, size_t n)
{
    struct rec *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++) {
        r[i].len = draw_size(&seed);
        r[i].data = malloc(r[i].len + 1);
        tu_fill(&seed, r[i].data, r[i].len, (int)tu_below(&seed, 2));
        r[i].summary_len = (size_t)tu_below(&seed, sizeof r[i].summary + 1);
        tu_fill(&seed, r[i].summary, r[i].summary_len, 0);
    }
    return r;
}

static void free_records(struct rec *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(r[i].data);
    free(r);
}

struct thread_arg {
    const struct ffr_reader *r;
    const struct rec *recs;
    size_t n;
    uint64_t seed;
    int bad;
};

static void *reader_thread(void *p)
{
    struct thread_arg *a = p;
    struct ffr_decoder *d;
    if (ffr_decoder_create(&d) < 0) {
        a->bad++;
        return NULL;
    }
    uint8_t *buf = malloc(5u << 20);
    for (int k = 0; k < 60; k++) {
        const size_t i = (size_t)tu_below(&a->seed, a->n);
        const int64_t got = ffr_reader_read(a->r, d, i, buf, 5u << 20);
        if (got != (int64_t)a->recs[i].len || memcmp(buf, a->recs[i].data, a->recs[i].len))
            a->bad++;
    }
    free(buf);
    ffr_decoder_destroy(d);
    return NULL;
}

static void check_dataset(const char *path, const struct rec *recs, size_t n, const char *what,
                          uint32_t align, int expect_shards_gt1)
{
    char err[512];
    struct ffr_reader *r = NULL;
    int rc = ffr_reader_open(&r, path, NULL, err, sizeof err);
    if (!ok(rc == 0, "%s: open (%s)", what, rc ? err : "ok")) return;
    is_int(ffr_reader_count(r), n, "%s: record count", what);
    if (expect_shards_gt1)
        ok(ffr_reader_shard_count(r) > 1, "%s: %u shards", what, ffr_reader_shard_count(r));
    size_t mlen;
    const char *meta = ffr_reader_metadata(r, &mlen);
    ok(mlen == strlen("final: yes\n") && memcmp(meta, "final: yes\n", mlen) == 0,
       "%s: metadata is the last one set", what);

    struct ffr_decoder *d;
    ffr_decoder_create(&d);
    uint8_t *buf = malloc(5u << 20), *ext = NULL;
    size_t bad_read = 0, bad_info = 0, bad_frame = 0, n_zstd = 0;
    for (size_t i = 0; i < n; i++) {
        struct ffr_record_info info;
        if (ffr_reader_info(r, i, &info) < 0 || info.raw_len != recs[i].len ||
            info.summary_len != recs[i].summary_len ||
            memcmp(info.summary, recs[i].summary, recs[i].summary_len) || info.offset % align ||
            info.extent_len % align) {
            bad_info++;
            continue;
        }
        n_zstd += info.codec == FFR_CODEC_ZSTD;
        const int64_t got = ffr_reader_read(r, d, i, buf, 5u << 20);
        if (got != (int64_t)recs[i].len || memcmp(buf, recs[i].data, recs[i].len)) bad_read++;
        /* The io path: the caller reads the aligned extent itself, then decodes it. */
        struct ffr_shard_info si;
        ffr_reader_shard(r, info.shard, &si);
        ext = realloc(ext, info.extent_len);
        const ssize_t k = pread(si.fd, ext, info.extent_len, (off_t)info.offset);
        const void *payload = NULL;
        const int64_t dn = ffr_frame_decode(d, &info, ext, (size_t)k, 1, buf, 5u << 20, &payload);
        if (k != (ssize_t)info.extent_len || dn != (int64_t)recs[i].len ||
            memcmp(buf, recs[i].data, recs[i].len))
            bad_frame++;
    }
    is_int(bad_info, 0, "%s: index info (sizes, summaries, alignment) of every record", what);
    is_int(bad_read, 0, "%s: every record reads back identical", what);
    is_int(bad_frame, 0, "%s: every caller-read extent decodes identical", what);
    tap_diag("%s: %zu of %zu records stored with zstd", what, n_zstd, n);
    is_int(ffr_reader_verify_all(r, NULL, NULL), 0, "%s: verify finds no problem", what);
    is_int(ffr_reader_read(r, d, n, buf, 5u << 20), -EINVAL, "%s: record past the end", what);

    pthread_t t[4];
    struct thread_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (struct thread_arg){ r, recs, n, 1000u + (uint64_t)k, 0 };
        pthread_create(&t[k], NULL, reader_thread, &a[k]);
    }
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        bad += a[k].bad;
    }
    is_int(bad, 0, "%s: concurrent reads from 4 threads", what);
    free(ext);
    free(buf);
    ffr_decoder_destroy(d);
    ffr_reader_close(r);
}

/* Every record through ffr_writer_append_frames, in runs of 1..7 frames, each in its own
 * 4096-aligned buffer (the run is written after all of them are laid out); odd records carry
 * their hash, even ones let the writer compute it. */
static int write_frames(struct ffr_writer *w, const struct rec *recs, size_t n)
{
    enum { RUN = 7 };
    const size_t cap = (5u << 20) + 8192;
    void *bufs[RUN] = { 0 };
    struct ffr_frame_in in[RUN];
    int rc = 0;
    for (int k = 0; k < RUN; k++)
        if (posix_memalign(&bufs[k], 4096, cap) != 0) rc = -ENOMEM;
    for (size_t i = 0, run = 1; i < n && rc == 0; i += run, run = run % RUN + 1) {
        const size_t m = i + run <= n ? run : n - i;
        for (size_t k = 0; k < m; k++) {
            const struct rec *r = &recs[i + k];
            memcpy((uint8_t *)bufs[k] + FFR_FRAME_HEADER_SIZE, r->data, r->len);
            in[k] = (struct ffr_frame_in){ .codec = FFR_CODEC_RAW,
                                           .frame = bufs[k],
                                           .frame_cap = cap,
                                           .stored_len = r->len,
                                           .raw_len = r->len,
                                           .hash = (i + k) % 2 ? ffr_hash(r->data, r->len) : 0,
                                           .hash_set = (int)((i + k) % 2),
                                           .summary = r->summary,
                                           .summary_len = r->summary_len };
        }
        rc = ffr_writer_append_frames(w, in, m);
    }
    for (int k = 0; k < RUN; k++)
        free(bufs[k]);
    return rc;
}

/* in_place 1: every other record goes through ffr_writer_append_frame from an aligned buffer;
 * 2: every record through ffr_writer_append_frames (write_frames). */
static int write_dataset(const char *path, const struct rec *recs, size_t n,
                         const struct ffr_writer_opts *o, int in_place)
{
    struct ffr_writer *w;
    int rc = ffr_writer_open(&w, path, o);
    if (rc < 0) return rc;
    ffr_writer_set_metadata(w, "first: yes\n", 11);
    if (in_place == 2) {
        rc = write_frames(w, recs, n);
        if (rc < 0) {
            ffr_writer_abort(w);
            return rc;
        }
        ffr_writer_set_metadata(w, "final: yes\n", 11);
        return ffr_writer_close(w);
    }
    void *frame = NULL;
    const size_t cap = (5u << 20) + 8192;
    if (in_place && posix_memalign(&frame, 4096, cap) != 0) return -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (in_place && i % 2) {
            memcpy((uint8_t *)frame + FFR_FRAME_HEADER_SIZE, recs[i].data, recs[i].len);
            const uint64_t h = i % 4 == 1 ? ffr_hash(recs[i].data, recs[i].len) : 0;
            rc = ffr_writer_append_frame(w, FFR_CODEC_RAW, frame, cap, recs[i].len, recs[i].len,
                                         i % 4 == 1 ? &h : NULL, recs[i].summary,
                                         recs[i].summary_len);
        } else {
            rc = ffr_writer_append(w, recs[i].data, recs[i].len, recs[i].summary,
                                   recs[i].summary_len);
        }
    }
    free(frame);
    if (rc < 0) {
        ffr_writer_abort(w);
        return rc;
    }
    ffr_writer_set_metadata(w, "final: yes\n", 11);
    return ffr_writer_close(w);
}

static int count_files(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

int main(void)
{
    const char *dir = tu_tmpdir();
    if (!dir) {
        printf("# cannot make a temp dir\n");
        return 99;
    }
    char path[1100];
    const size_t n = 40;
    struct rec *recs = make_records(42, n);

    static const struct {
        uint32_t align;
        int codec;
        uint64_t shard;
        int direct, in_place;
        const char *name;
    } cases[] = {
        { 4096, FFR_CODEC_RAW, 0, 0, 0, "raw, align 4096, one file" },
        { 4096, FFR_CODEC_ZSTD, 0, 0, 0, "zstd, align 4096, one file" },
        { 1, FFR_CODEC_ZSTD, 0, 0, 1, "zstd, align 1, one file, frames in place" },
        { 512, FFR_CODEC_RAW, 6u << 20, 0, 1, "raw, align 512, 6 MiB shards, frames in place" },
        { 4096, FFR_CODEC_ZSTD, 3u << 20, 1, 0, "zstd, align 4096, 3 MiB shards, O_DIRECT" },
        { 4096, FFR_CODEC_RAW, 0, 1, 1, "raw, align 4096, O_DIRECT, frames in place" },
        { 8192, FFR_CODEC_RAW, 2u << 20, 1, 1, "raw, align 8192, O_DIRECT shards in place" },
        { 4096, FFR_CODEC_RAW, 0, 1, 2, "raw, align 4096, O_DIRECT, runs of frames" },
        { 4096, FFR_CODEC_RAW, 2u << 20, 1, 2, "raw, 2 MiB O_DIRECT shards, runs of frames" },
        { 64, FFR_CODEC_RAW, 3u << 20, 0, 2, "raw, align 64, 3 MiB shards, runs of frames" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ffr_writer_opts o;
        ffr_writer_opts_default(&o);
        o.align = cases[c].align;
        o.codec = cases[c].codec;
        o.shard_bytes = cases[c].shard;
        o.direct_io = cases[c].direct;
        o.durable = 0;
        snprintf(path, sizeof path, "%s/case%zu.ffr", dir, c);
        const int rc = write_dataset(path, recs, n, &o, cases[c].in_place);
        if (!ok(rc == 0, "%s: write (%s)", cases[c].name, ffr_strerror(rc))) continue;
        check_dataset(path, recs, n, cases[c].name, cases[c].align, cases[c].shard > 0);
    }

    /* ffr_reader_content_hash: the records as stored, whatever the sharding, alignment and
     * write path; the codec changes the stored bytes, and so does one byte of one record */
    uint64_t hs[sizeof cases / sizeof cases[0]] = { 0 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct ffr_reader *cr = NULL;
        snprintf(path, sizeof path, "%s/case%zu.ffr", dir, c);
        if (ffr_reader_open(&cr, path, NULL, NULL, 0) == 0) hs[c] = ffr_reader_content_hash(cr);
        ffr_reader_close(cr);
    }
    int same_raw = hs[0] != 0, same_zstd = hs[1] != 0;
    for (size_t c = 1; c < sizeof cases / sizeof cases[0]; c++) {
        /* frames handed in place are stored raw (write_dataset), whatever the writer's codec */
        if (cases[c].codec == FFR_CODEC_RAW)
            same_raw &= hs[c] == hs[0];
        else if (!cases[c].in_place)
            same_zstd &= hs[c] == hs[1];
    }
    ok(same_raw && same_zstd && hs[0] != hs[1],
       "content hash: equal over every sharding and alignment of a codec, another per codec");
    recs[7].data[3] ^= 1;
    snprintf(path, sizeof path, "%s/changed.ffr", dir);
    struct ffr_reader *chr = NULL;
    ok(write_dataset(path, recs, n, NULL, 0) == 0 &&
           ffr_reader_open(&chr, path, NULL, NULL, 0) == 0 && ffr_reader_content_hash(chr) != hs[0],
       "content hash: one bit of one record changes it");
    ffr_reader_close(chr);
    recs[7].data[3] ^= 1;

    /* An empty dataset is valid and has zero records. */
    snprintf(path, sizeof path, "%s/empty.ffr", dir);
    ok(write_dataset(path, recs, 0, NULL, 0) == 0, "empty dataset written");
    struct ffr_reader *r;
    char err[256];
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0 && ffr_reader_count(r) == 0,
       "empty dataset opens with 0 records");
    ffr_reader_close(r);

    /* Abort, and a crash before close, leave no file under the final name. */
    char sub[800];
    snprintf(sub, sizeof sub, "%s/abort", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/x.ffr", sub);
    struct ffr_writer_opts so;
    ffr_writer_opts_default(&so);
    so.shard_bytes = 2u << 20;
    struct ffr_writer *w;
    ffr_writer_open(&w, path, &so);
    for (size_t i = 0; i < 10; i++)
        ffr_writer_append(w, recs[i].data, recs[i].len, NULL, 0);
    ffr_writer_abort(w);
    is_int(count_files(sub), 0, "abort of a sharded writer removes its shards and temporaries");

    const pid_t pid = fork();
    if (pid == 0) {
        struct ffr_writer *cw;
        if (ffr_writer_open(&cw, path, NULL) == 0)
            for (size_t i = 0; i < 5; i++)
                ffr_writer_append(cw, recs[i].data, recs[i].len, NULL, 0);
        _exit(0); /* dies without closing, as a crash would */
    }
    int st;
    waitpid(pid, &st, 0);
    ok(access(path, F_OK) != 0, "a writer killed before close leaves no file named %s", "x.ffr");
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) < 0, "and nothing opens under that name");

    /* A record over the format's limit is refused before anything is written. */
    ffr_writer_open(&w, path, NULL);
    is_int(ffr_writer_append_encoded(w, FFR_CODEC_RAW, recs[0].data, (size_t)FFR_RECORD_MAX + 1,
                                     (size_t)FFR_RECORD_MAX + 1, NULL, NULL, 0),
           -FFR_ETOOBIG, "a record over 4 GiB is refused");
    ffr_writer_abort(w);

    free_records(recs, n);
    tu_rmtree(dir);
    return tap_done();
}
