/*
 * ffr records read through ffio engines: every engine x buffered/O_DIRECT reads random batches
 * of a sharded dataset (raw and zstd records, sizes from 0 to ~1 MiB) into pinned extents and
 * must return exactly what the plain ffr reader returns; a damaged payload is reported as a
 * checksum error naming its shard and record while the rest of the batch still lands. Batches
 * split into submit and wait (the loader's read-ahead) may be outstanding together and waited for
 * in any order.
 */
#include <stdio.h>

#include "ffio_test_util.h"

#define N_REC 60

static uint8_t *recs[N_REC];
static size_t lens[N_REC];

static int make_dataset(const char *path)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.codec = FFR_CODEC_ZSTD;
    o.shard_bytes = 3u << 20;
    o.durable = 0;
    struct ffr_writer *w;
    int rc = ffr_writer_open(&w, path, &o);
    uint64_t s = 11;
    for (int i = 0; i < N_REC && rc == 0; i++) {
        lens[i] = i % 7 == 0 ? 0 : (size_t)tu_below(&s, i % 3 ? 5000 : 1u << 20);
        recs[i] = malloc(lens[i] + 1);
        /* Half the records compress (runs), half do not (noise): both codecs appear. */
        for (size_t k = 0; k < lens[i]; k++)
            recs[i][k] = i % 2 ? (uint8_t)tu_rand(&s) : (uint8_t)(k / 97);
        rc = ffr_writer_append(w, recs[i], lens[i], NULL, 0);
    }
    return rc == 0 ? ffr_writer_close(w) : rc;
}

int main(int argc, char **argv)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/records-test.ffr", tu_dir(argc, argv));
    if (!ok(make_dataset(path) == 0, "sharded dataset written")) return tap_done();
    struct ffr_reader *r;
    char err[256];
    if (!ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "opened")) return tap_done();
    ok(ffr_reader_shard_count(r) > 1, "%u shards", ffr_reader_shard_count(r));

    /* One pinned arena: 16 extents of up to 1 MiB + a page, and 16 destinations. */
    const size_t slot = (1u << 20) + 2 * 4096;
    struct ffio_pinned pin;
    if (!ok(ffio_pinned_alloc(32 * slot, 0, &pin) == 0, "pinned arena")) return tap_done();

    static const enum ffio_engine_kind kinds[] = { FFIO_ENGINE_URING, FFIO_ENGINE_PREAD,
                                                   FFIO_ENGINE_MMAP };
    static const enum ffio_direct dirs[] = { FFIO_DIRECT_OFF, FFIO_DIRECT_AUTO };
    const int have_uring = ffio_uring_probe() == 0;
    for (size_t ki = 0; ki < 3; ki++)
        for (size_t di = 0; di < 2; di++) {
            if (kinds[ki] == FFIO_ENGINE_URING && !have_uring) {
                printf("# SKIP io_uring unavailable here\n");
                continue;
            }
            struct ffio_records_opts o;
            ffio_records_opts_default(&o);
            o.io.engine = kinds[ki];
            o.io.direct = dirs[di];
            o.io.queue_depth = 8;
            struct ffio_records *rr;
            if (!ok(ffio_records_open(r, &o, &rr) == 0, "%s direct=%d: open",
                    ffio_engine_kind_name(kinds[ki]), (int)dirs[di]))
                continue;
            uint64_t s = 100 + ki * 10 + di;
            int bad = 0, zero_copy = 0;
            for (int batch = 0; batch < 12; batch++) {
                struct ffio_record_req q[16];
                for (int k = 0; k < 16; k++) {
                    q[k] = (struct ffio_record_req){
                        .index = tu_below(&s, N_REC),
                        .extent = (uint8_t *)pin.ptr + (size_t)k * slot,
                        .extent_cap = slot,
                        /* Every other request leaves raw records in place (zero copy). */
                        .dst = k % 2 ? (uint8_t *)pin.ptr + (size_t)(16 + k) * slot : NULL,
                        .dst_cap = slot,
                    };
                    struct ffr_record_info in;
                    ffr_reader_info(r, q[k].index, &in);
                    if (!q[k].dst && in.codec != FFR_CODEC_RAW)
                        q[k].dst = (uint8_t *)pin.ptr + (size_t)(16 + k) * slot;
                }
                if (ffio_records_read(rr, q, 16) != 0) bad++;
                for (int k = 0; k < 16; k++) {
                    const uint64_t i = q[k].index;
                    if (q[k].result != (int64_t)lens[i] ||
                        (lens[i] && memcmp(q[k].payload, recs[i], lens[i])))
                        bad++;
                    zero_copy += q[k].dst == NULL && q[k].payload != NULL;
                }
            }
            is_int(bad, 0, "%s direct=%d: 192 random records equal the plain reader's",
                   ffio_engine_kind_name(kinds[ki]), (int)dirs[di]);
            ok(zero_copy > 0, "raw records were left in place %d times", zero_copy);

            /*
             * Three batches outstanding at once (15 extents through a queue of 8), waited for
             * in another order than submitted, each with one unknown record: every batch gets
             * its own records, and its own failure count.
             */
            struct ffio_record_req m[3][5];
            int rounds_bad = 0;
            for (int round = 0; round < 4; round++) {
                for (int b = 0; b < 3; b++) {
                    for (int k = 0; k < 5; k++) {
                        const size_t at = (size_t)(b * 5 + k);
                        m[b][k] = (struct ffio_record_req){
                            .index = k == b ? N_REC + 7 : tu_below(&s, N_REC),
                            .extent = (uint8_t *)pin.ptr + at * slot,
                            .extent_cap = slot,
                            .dst = (uint8_t *)pin.ptr + (16 + at) * slot,
                            .dst_cap = slot,
                        };
                    }
                    if (ffio_records_submit(rr, m[b], 5) != 0) rounds_bad++;
                }
                if (round == 0) {
                    is_int(ffio_records_submit(rr, m[1], 5), -EBUSY,
                           "a batch still outstanding cannot be submitted again");
                    is_int(ffio_records_wait(rr, m[1], 4), -EINVAL,
                           "a wait must name an outstanding batch");
                }
                static const int order[4][3] = {
                    { 2, 0, 1 }, { 1, 2, 0 }, { 0, 1, 2 }, { 2, 1, 0 }
                };
                for (int w = 0; w < 3; w++) {
                    /* % 3 only for GCC -O3, which cannot bound order[][] (-Warray-bounds). */
                    const int b = order[round][w] % 3;
                    if (ffio_records_wait(rr, m[b], 5) != 1) rounds_bad++;
                    for (int k = 0; k < 5; k++) {
                        const uint64_t i = m[b][k].index;
                        if (k == b ? m[b][k].result >= 0
                                   : m[b][k].result != (int64_t)lens[i] ||
                                         (lens[i] && memcmp(m[b][k].payload, recs[i], lens[i])))
                            rounds_bad++;
                    }
                }
            }
            is_int(rounds_bad, 0, "%s direct=%d: interleaved batches, waited out of order",
                   ffio_engine_kind_name(kinds[ki]), (int)dirs[di]);
            /* Closing with reads in flight lets them land first (ASan watches the buffers). */
            ok(ffio_records_submit(rr, m[0], 5) == 0 && ffio_records_submit(rr, m[1], 5) == 0,
               "two batches left outstanding at close");
            ffio_records_close(rr);
        }

    /* Too small an extent buffer, and a zstd record without a destination. */
    struct ffio_records *rr;
    ffio_records_open(r, NULL, &rr);
    uint64_t zi = 0;
    for (uint64_t i = 0; i < N_REC; i++) {
        struct ffr_record_info in;
        ffr_reader_info(r, i, &in);
        if (in.codec == FFR_CODEC_ZSTD) zi = i;
    }
    struct ffio_record_req q[2] = {
        { .index = 1, .extent = pin.ptr, .extent_cap = 10 },
        { .index = zi, .extent = (uint8_t *)pin.ptr + slot, .extent_cap = slot },
    };
    is_int(ffio_records_read(rr, q, 2), 2, "two bad requests fail");
    is_int(q[0].result, -FFR_ETOOBIG, "small extent buffer: FFR_ETOOBIG");
    is_int(q[1].result, -EINVAL, "zstd record without a destination: EINVAL");
    ffio_records_close(rr);
    ffr_reader_close(r);

    /* Damage one payload byte of record 1 (the first shard) on disk. */
    char shard[1100];
    snprintf(shard, sizeof shard, "%s/records-test-00000.ffr", tu_dir(argc, argv));
    ffr_reader_open(&r, path, NULL, err, sizeof err);
    struct ffr_record_info in;
    ffr_reader_info(r, 1, &in);
    ffr_reader_close(r);
    const int fd = open(shard, O_RDWR);
    uint8_t b;
    pread(fd, &b, 1, (off_t)(in.offset + 32 + in.stored_len / 2));
    b ^= 0x40;
    pwrite(fd, &b, 1, (off_t)(in.offset + 32 + in.stored_len / 2));
    close(fd);
    ffr_reader_open(&r, path, NULL, err, sizeof err);
    ffio_records_open(r, NULL, &rr);
    struct ffio_record_req d[3];
    for (int k = 0; k < 3; k++)
        d[k] = (struct ffio_record_req){ .index = (uint64_t)k,
                                         .extent = (uint8_t *)pin.ptr + k * slot,
                                         .extent_cap = slot,
                                         .dst = (uint8_t *)pin.ptr + (16 + k) * slot,
                                         .dst_cap = slot };
    is_int(ffio_records_read(rr, d, 3), 1, "one of three records fails");
    is_int(d[1].result, -FFR_ECHECKSUM, "the damaged record is a checksum error");
    ok(d[0].result == (int64_t)lens[0] && d[2].result == (int64_t)lens[2], "the others land");
    char line[512];
    ffio_records_describe(rr, &d[1], line, sizeof line);
    ok(strstr(line, "records-test-00000.ffr") && strstr(line, "record 1"), "described: %s", line);
    ffio_records_close(rr);
    ffr_reader_close(r);
    ffio_pinned_free(&pin);
    for (int i = 0; i < N_REC; i++)
        free(recs[i]);
    return tap_done();
}
