/*
 * ffr_lines: prints what tools/ffr_mini.c prints, but through the library's public API, so that
 * test_ffr_mini.sh can compare the two readers byte for byte (style guide rule 21).
 *
 * usage: ffr_lines FILE (a record file or a manifest)
 *
 * Output, one line per record: number raw_len xxh3(raw bytes) summary_len xxh3(summary), then
 * "records N" and "metadata LEN xxh3". The file is opened with ffr_reader_open, checked whole with
 * ffr_reader_verify_all, and every record read with ffr_reader_read; when the metadata has the
 * line `encoding: ffr-det-1` (docs/format.md 8.3), every record is also decoded with
 * det_decode and its summary compared with the one the library derives from the sample.
 * Exit 0 when all of that succeeds; 1, with one line per problem on stderr ending in the error's
 * name (e.g. "(FFR_ECORRUPT)"), when anything fails; 2 on bad usage.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "det.h"
#include "ffr.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The spec's name for a code (section 9 pins the numbers), or "errno" for a system error. */
static const char *lines_code(int64_t rc)
{
    static const char *const names[] = { "FFR_EBADMAGIC", "FFR_EVERSION",  "FFR_EFLAGS",
                                         "FFR_ETRUNC",    "FFR_ECHECKSUM", "FFR_ECORRUPT",
                                         "FFR_EFOREIGN",  "FFR_ESHARD",    "FFR_ETOOBIG" };
    return rc <= -FFR_EBADMAGIC && rc >= -FFR_ETOOBIG ? names[-rc - FFR_EBADMAGIC] : "errno";
}

/* Whether the metadata text has `want` as a whole line (as ffr-mini decides it). */
static int lines_has_line(const char *text, size_t len, const char *want)
{
    const size_t wl = strlen(want);
    for (size_t at = 0; at + wl <= len;) {
        if (!memcmp(text + at, want, wl) && (at + wl == len || text[at + wl] == '\n')) return 1;
        const char *nl = memchr(text + at, '\n', len - at);
        if (!nl) break;
        at = (size_t)(nl - text) + 1;
    }
    return 0;
}

static void lines_problem(void *ctx, const struct ffr_problem *p)
{
    const char *path = ctx;
    fprintf(stderr, "ffr_lines: %s: %s, record %" PRId64 ", offset %" PRIu64 ": %s (%s)\n", path,
            p->path, p->record, p->offset, p->what, lines_code(p->code));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ffr_lines FILE\n");
        return 2;
    }
    const char *const path = argv[1];
    struct ffr_reader *r = NULL;
    struct ffr_decoder *d = NULL;
    uint8_t *buf = NULL, *sum = NULL;
    size_t buf_cap = 0, sum_cap = 0;
    int status = 1;
    char err[512] = "";
    int64_t rc = ffr_reader_open(&r, path, NULL, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "ffr_lines: %s: open: %s (%s)\n", path,
                err[0] ? err : ffr_strerror((int)rc), lines_code(rc));
        goto out;
    }
    rc = ffr_reader_verify_all(r, lines_problem, (void *)path);
    if (rc != 0) {
        if (rc > 0) fprintf(stderr, "ffr_lines: %s: verify_all: %" PRId64 " problems\n", path, rc);
        if (rc < 0)
            fprintf(stderr, "ffr_lines: %s: verify_all: %s (%s)\n", path, ffr_strerror((int)rc),
                    lines_code(rc));
        goto out;
    }
    rc = ffr_decoder_create(&d);
    if (rc < 0) {
        fprintf(stderr, "ffr_lines: %s: %s\n", path, ffr_strerror((int)rc));
        goto out;
    }
    size_t meta_len = 0;
    const char *const meta = ffr_reader_metadata(r, &meta_len);
    const int det = lines_has_line(meta, meta_len, "encoding: ffr-det-1");
    const uint64_t n = ffr_reader_count(r);
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info info;
        rc = ffr_reader_info(r, i, &info);
        if (rc < 0) {
            fprintf(stderr, "ffr_lines: %s: record %" PRIu64 ": info: %s (%s)\n", path, i,
                    ffr_strerror((int)rc), lines_code(rc));
            goto out;
        }
        if (info.raw_len + (size_t)1 > buf_cap) {
            uint8_t *const grown = realloc(buf, info.raw_len + (size_t)1);
            if (!grown) goto out;
            buf = grown;
            buf_cap = info.raw_len + (size_t)1;
        }
        rc = ffr_reader_read(r, d, i, buf, buf_cap);
        if (rc != info.raw_len) {
            fprintf(stderr, "ffr_lines: %s: record %" PRIu64 ": read gave %" PRId64 ": %s (%s)\n",
                    path, i, rc, rc < 0 ? ffr_strerror((int)rc) : "wrong length",
                    rc < 0 ? lines_code(rc) : "FFR_ECORRUPT");
            goto out;
        }
        if (det) {
            struct det_sample s;
            rc = det_decode(buf, info.raw_len, &s);
            const size_t want = rc < 0 ? 0 : det_summary_size(&s);
            if (rc == 0 && want > sum_cap) {
                uint8_t *const grown = realloc(sum, want);
                if (!grown) goto out;
                sum = grown;
                sum_cap = want;
            }
            if (rc == 0) rc = det_summary_encode(&s, sum, sum_cap);
            if (rc < 0 || want != info.summary_len || memcmp(sum, info.summary, want)) {
                fprintf(stderr, "ffr_lines: %s: record %" PRIu64 ": %s (%s)\n", path, i,
                        rc < 0 ? ffr_strerror((int)rc) : "index summary differs from the sample",
                        rc < 0 ? lines_code(rc) : "FFR_ECORRUPT");
                goto out;
            }
        }
        printf("%" PRIu64 " %" PRIu32 " %016" PRIx64 " %" PRIu32 " %016" PRIx64 "\n", i,
               info.raw_len, (uint64_t)XXH3_64bits(buf, info.raw_len), info.summary_len,
               (uint64_t)XXH3_64bits(info.summary, info.summary_len));
    }
    printf("records %" PRIu64 "\nmetadata %zu %016" PRIx64 "\n", n, meta_len,
           (uint64_t)XXH3_64bits(meta, meta_len));
    status = 0;
out:
    free(sum);
    free(buf);
    ffr_decoder_destroy(d);
    ffr_reader_close(r);
    return status;
}
