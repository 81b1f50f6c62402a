/*
 * Writes small, deterministic sample datasets into a directory: the seed corpus of the reader's
 * fuzz target and the inputs of the ffr-mini cross-check. Usage: gen_samples DIR
 * Files: det-align64.ffr (detection samples, raw and zstd), plain-align1.ffr (opaque records,
 * zstd), empty.ffr (no records), sharded.ffr + sharded-0000N.ffr (a manifest and its shards).
 */
#include <stdio.h>
#include <string.h>

#include "det.h"
#include "ffr.h"
#include "testutil.h"

static int write_det(const char *path, uint32_t align, int codec)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.align = align;
    o.codec = codec;
    o.durable = 0;
    struct ffr_writer *w;
    int rc = ffr_writer_open(&w, path, &o);
    if (rc < 0) return rc;
    for (uint32_t i = 0; i < 3 && rc == 0; i++) {
        uint8_t px[6 * 4 * 3];
        for (size_t k = 0; k < sizeof px; k++)
            px[k] = (uint8_t)(k * 7 + i * 40);
        const float labels[10] = { (float)i, 0.5f, 0.5f, 0.25f, 0.5f, 2, 0.2f, 0.3f, 0.1f, 0.1f };
        const uint32_t counts[2] = { 3, 0 };
        const float pts[6] = { 0.4f, 0.3f, 0.6f, 0.3f, 0.5f, 0.7f };
        char name[32];
        struct det_sample s = {
            .h = 4,
            .w = 6,
            .h0 = 8,
            .w0 = 12,
            .pixel_format = i == 1 ? DET_RGB8_SUB : DET_RGB8,
            .pixels = px,
            .pixel_bytes = sizeof px,
            .n_labels = i == 2 ? 0 : 1 + i,
            .labels = labels,
            .n_points = i == 1 ? 3 : 0,
            .seg_counts = i == 1 ? counts : NULL,
            .seg_points = i == 1 ? pts : NULL,
            .image_id = 100 + i,
            .name = name,
        };
        s.name_len = (uint32_t)snprintf(name, sizeof name, "%012u.jpg", 100 + i);
        uint8_t buf[1024], sum[128];
        const int64_t n = det_encode(&s, buf, sizeof buf);
        const int64_t sn = det_summary_encode(&s, sum, sizeof sum);
        rc = n < 0    ? (int)n
             : sn < 0 ? (int)sn
                      : ffr_writer_append(w, buf, (size_t)n, sum, (size_t)sn);
    }
    static const char meta[] = "encoding: ffr-det-1\nnames: [circle, square, star]\nsize: 6\n";
    if (rc == 0) rc = ffr_writer_set_metadata(w, meta, sizeof meta - 1);
    if (rc < 0) {
        ffr_writer_abort(w);
        return rc;
    }
    return ffr_writer_close(w);
}

static int write_plain(const char *path, uint32_t align, uint64_t shard_bytes, size_t n)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.align = align;
    o.codec = FFR_CODEC_ZSTD;
    o.shard_bytes = shard_bytes;
    o.durable = 0;
    struct ffr_writer *w;
    int rc = ffr_writer_open(&w, path, &o);
    uint64_t seed = 3;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint8_t rec[700];
        const size_t len = (size_t)tu_below(&seed, sizeof rec);
        tu_fill(&seed, rec, len, (int)(i % 2));
        rc = ffr_writer_append(w, rec, len, rec, i % 3);
    }
    if (rc == 0) rc = ffr_writer_set_metadata(w, "kind: plain\n", 12);
    if (rc < 0) {
        ffr_writer_abort(w);
        return rc;
    }
    return ffr_writer_close(w);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_samples DIR\n");
        return 2;
    }
    char p[4096];
    int rc = 0;
    snprintf(p, sizeof p, "%s/det-align64.ffr", argv[1]);
    if (!rc) rc = write_det(p, 64, FFR_CODEC_ZSTD);
    snprintf(p, sizeof p, "%s/plain-align1.ffr", argv[1]);
    if (!rc) rc = write_plain(p, 1, 0, 6);
    snprintf(p, sizeof p, "%s/empty.ffr", argv[1]);
    if (!rc) rc = write_plain(p, 4096, 0, 0);
    snprintf(p, sizeof p, "%s/sharded.ffr", argv[1]);
    if (!rc) rc = write_plain(p, 256, 3000, 8);
    if (rc < 0) fprintf(stderr, "gen_samples: %s\n", ffr_strerror(rc));
    return rc < 0 ? 1 : 0;
}
