/*
 * Corruption: every single-byte flip of small files is caught by open or by verify; every
 * truncation and any appended bytes are refused at open; wrong magic, newer versions, unknown
 * flags, absurd sizes (with hashes made consistent, so the checks behind them are tested) and
 * HFAI FFRecord files each give their own error. Manifests: missing, altered, swapped shards.
 * Files that are not files (a FIFO dataset or shard) and a shard listed twice are refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffr.h"
#include "ffr_internal.h"
#include "tap.h"
#include "testutil.h"

static char err[512];

static int open_buf(const uint8_t *b, size_t n, struct ffr_reader **out)
{
    const int fd = tu_memfd(b, n);
    if (fd < 0) return -EIO;
    const int rc = ffr_reader_open_fd(out, fd, "corrupt.ffr", NULL, err, sizeof err);
    close(fd);
    return rc;
}

/* 0: the damage went unnoticed; 1: open refused it; 2: verify reported it. */
static int caught(const uint8_t *b, size_t n)
{
    struct ffr_reader *r;
    if (open_buf(b, n, &r) < 0) return 1;
    const int64_t p = ffr_reader_verify_all(r, NULL, NULL);
    ffr_reader_close(r);
    return p != 0 ? 2 : 0;
}

static uint8_t *make_file(const char *dir, uint32_t align, int codec, size_t *len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/small-%u-%d.ffr", dir, align, codec);
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.align = align;
    o.codec = codec;
    o.durable = 0;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return NULL;
    uint8_t rec[300];
    uint64_t s = 7;
    tu_fill(&s, rec, sizeof rec, 1);
    ffr_writer_append(w, rec, sizeof rec, "sum0", 4);
    ffr_writer_append(w, rec, 0, NULL, 0);
    ffr_writer_append(w, rec + 10, 77, "s2", 2);
    ffr_writer_set_metadata(w, "names: [a, b]\n", 14);
    if (ffr_writer_close(w) < 0) return NULL;
    return tu_slurp(path, len);
}

/* Re-hash the header and all trailer copies after an edit, so only the edited field is wrong. */
static void rehash(uint8_t *b, size_t n)
{
    ffr_wr64(b + 56, ffr_xxh3(b, 56));
    for (unsigned k = 0; k < 3; k++) {
        uint8_t *l = b + n - FFR_TRAILER_SIZE + k * FFR_TRAILER_SLOT;
        ffr_wr64(l + 56, ffr_xxh3(l, 56));
    }
}

static void rehash_index(uint8_t *b, size_t n)
{
    const uint8_t *l = b + n - FFR_TRAILER_SIZE;
    const uint64_t off = ffr_rd64(l + 16), size = ffr_rd64(l + 24);
    for (unsigned k = 0; k < 3; k++)
        ffr_wr64(b + n - FFR_TRAILER_SIZE + k * FFR_TRAILER_SLOT + 40, ffr_xxh3(b + off, size));
    rehash(b, n);
}

static void flips_and_truncations(const char *dir, uint32_t align, int codec)
{
    size_t n;
    uint8_t *orig = make_file(dir, align, codec, &n);
    if (!ok(orig != NULL, "small file align %u codec %d written", align, codec)) return;
    ok(caught(orig, n) == 0, "align %u: the intact file opens and verifies (%zu bytes)", align, n);
    uint8_t *b = malloc(n);
    size_t missed = 0, first_missed = 0, by_open = 0, by_verify = 0;
    static const uint8_t masks[] = { 0xff, 0x01, 0x80 };
    for (size_t m = 0; m < sizeof masks; m++)
        for (size_t i = 0; i < n; i++) {
            memcpy(b, orig, n);
            b[i] ^= masks[m];
            const int c = caught(b, n);
            by_open += c == 1;
            by_verify += c == 2;
            if (!c && !missed++) first_missed = i;
        }
    if (!ok(missed == 0, "align %u codec %d: all %zu single-byte flips (3 masks) caught", align,
            codec, 3 * n))
        tap_diag("%zu missed, first at offset %zu", missed, first_missed);
    tap_diag("caught by open: %zu, by verify: %zu", by_open, by_verify);

    size_t opened = 0;
    for (size_t len = 0; len < n; len++) {
        struct ffr_reader *r;
        if (open_buf(orig, len, &r) == 0) {
            opened++;
            ffr_reader_close(r);
        }
    }
    is_int(opened, 0, "align %u: truncation at each of %zu lengths is refused at open", align, n);
    uint8_t *longer = calloc(1, n + 4096);
    memcpy(longer, orig, n);
    struct ffr_reader *r;
    is_int(open_buf(longer, n + 1, &r), -FFR_ETRUNC, "one appended byte is refused");
    is_int(open_buf(longer, n + 4096, &r), -FFR_ETRUNC, "an appended page is refused");
    free(longer);
    free(b);
    free(orig);
}

static void named_errors(const char *dir)
{
    size_t n;
    uint8_t *orig = make_file(dir, 64, FFR_CODEC_RAW, &n);
    uint8_t *b = malloc(n);
    struct ffr_reader *r;

    memcpy(b, orig, n);
    memcpy(b, "GARBAGE!", 8);
    is_int(open_buf(b, n, &r), -FFR_EBADMAGIC, "wrong magic: FFR_EBADMAGIC");

    memcpy(b, orig, n);
    ffr_wr32(b + 8, 2);
    rehash(b, n);
    for (unsigned k = 0; k < 3; k++)
        ffr_wr32(b + n - FFR_TRAILER_SIZE + k * 512 + 8, 2);
    rehash(b, n);
    is_int(open_buf(b, n, &r), -FFR_EVERSION, "version 2: FFR_EVERSION");
    ok(strstr(err, "version 2") != NULL, "message names the version: %s", err);
    ok(strstr(err, "upgrade the tools") != NULL, "a well-hashed newer header: upgrade (%s)", err);
    /* one flipped bit in the version, hash not redone: damage, not a newer writer (issue 20) */
    memcpy(b, orig, n);
    b[9] ^= 1;
    is_int(open_buf(b, n, &r), -FFR_EVERSION, "a flipped version byte: FFR_EVERSION");
    ok(strstr(err, "probably damaged") && !strstr(err, "upgrade"),
       "... said to be damaged, not newer: %s", err);

    memcpy(b, orig, n);
    ffr_wr32(b + 12, 4);
    for (unsigned k = 0; k < 3; k++)
        ffr_wr32(b + n - FFR_TRAILER_SIZE + k * 512 + 12, 4);
    rehash(b, n);
    is_int(open_buf(b, n, &r), -FFR_EFLAGS, "unknown flag: FFR_EFLAGS");

    /* Absurd sizes behind valid hashes: caught by the consistency checks, no huge allocation. */
    const uint8_t *l = orig + n - FFR_TRAILER_SIZE;
    const uint64_t ioff = ffr_rd64(l + 16);
    memcpy(b, orig, n);
    ffr_wr32(b + ioff + 64 + 8, 0xfffffff0u); /* row 0 stored_len */
    rehash_index(b, n);
    is_int(open_buf(b, n, &r), -FFR_ECORRUPT, "absurd stored length in the index: FFR_ECORRUPT");

    memcpy(b, orig, n);
    for (unsigned k = 0; k < 3; k++)
        ffr_wr64(b + n - FFR_TRAILER_SIZE + k * 512 + 24, 1ull << 62);
    rehash(b, n);
    is_int(open_buf(b, n, &r), -FFR_ECORRUPT, "absurd index size in the trailer: FFR_ECORRUPT");

    memcpy(b, orig, n);
    ffr_wr64(b + ioff + 8, 1ull << 60); /* record count in the index header */
    for (unsigned k = 0; k < 3; k++)
        ffr_wr64(b + n - FFR_TRAILER_SIZE + k * 512 + 32, 1ull << 60);
    rehash_index(b, n);
    is_int(open_buf(b, n, &r), -FFR_ECORRUPT, "absurd record count: FFR_ECORRUPT");

    memcpy(b, orig, n);
    ffr_wr64(b + ioff + 64 + 32, 64 + 1); /* row 1 offset, unaligned */
    rehash_index(b, n);
    is_int(open_buf(b, n, &r), -FFR_ECORRUPT, "unaligned record offset: FFR_ECORRUPT");
    ok(strstr(err, "row 1") != NULL, "message names the row: %s", err);

    /* One damaged trailer copy: open still works from the others, verify reports it. */
    memcpy(b, orig, n);
    b[n - FFR_TRAILER_SIZE + 20] ^= 1;
    ok(open_buf(b, n, &r) == 0, "open survives one damaged trailer copy");
    is_int(ffr_reader_verify_all(r, NULL, NULL), 1, "verify reports exactly that copy");
    ffr_reader_close(r);
    memcpy(b, orig, n);
    for (unsigned k = 0; k < 3; k++)
        b[n - FFR_TRAILER_SIZE + k * 512 + 20] ^= 1;
    is_int(open_buf(b, n, &r), -FFR_ETRUNC, "all three trailer copies damaged: refused");

    /* A record whose payload was damaged reads as a checksum error, naming nothing else. */
    memcpy(b, orig, n);
    const uint64_t roff = ffr_rd64(orig + ioff + 64);
    b[roff + 32 + 5] ^= 0x10;
    ok(open_buf(b, n, &r) == 0, "damaged payload still opens");
    uint8_t out[400];
    is_int(ffr_reader_read(r, NULL, 0, out, sizeof out), -FFR_ECHECKSUM,
           "reading it gives FFR_ECHECKSUM");
    is_int(ffr_reader_read(r, NULL, 2, out, sizeof out), 77, "other records still read");
    is_int(ffr_reader_read(r, NULL, 2, out, 10), -FFR_ETOOBIG, "small destination: FFR_ETOOBIG");
    ffr_reader_close(r);

    /* HFAI FFRecord: u32 crc, u64 n, n u32 checksums, n u64 offsets (first = 12 + 12n). */
    uint8_t hf[12 + 12 * 2 + 20] = { 0 };
    ffr_wr64(hf + 4, 2);
    ffr_wr64(hf + 12 + 8, 12 + 24);
    ffr_wr64(hf + 12 + 8 + 8, 12 + 24 + 10);
    is_int(open_buf(hf, sizeof hf, &r), -FFR_EFOREIGN, "HFAI FFRecord file: FFR_EFOREIGN");
    ok(strstr(err, "FFRecord") != NULL, "message says so: %s", err);
    free(b);
    free(orig);
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Six 5000-byte records in shards of 16 KiB: NAME-00000.ffr ... beside the manifest path. */
static int write_sharded(const char *path)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.shard_bytes = 16384;
    o.durable = 0;
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, &o) < 0) return -1;
    static const uint8_t rec[5000] = { 1 };
    for (int i = 0; i < 6; i++)
        ffr_writer_append(w, rec, sizeof rec, NULL, 0);
    return ffr_writer_close(w);
}

static void manifests(const char *dir)
{
    char path[600], shard[700];
    snprintf(path, sizeof path, "%s/set.ffr", dir);
    struct ffr_writer *w;
    uint8_t rec[5000] = { 1 };
    ok(write_sharded(path) == 0, "sharded dataset written");
    struct ffr_reader *r;
    /* Open first: arguments of one call are evaluated in no fixed order. */
    r = NULL;
    const int orc = ffr_reader_open(&r, path, NULL, err, sizeof err);
    const uint32_t shards = orc == 0 ? ffr_reader_shard_count(r) : 0;
    ok(orc == 0 && shards >= 3, "opens with %u shards", shards);
    ffr_reader_close(r);

    snprintf(shard, sizeof shard, "%s/set-00001.ffr", dir);
    char moved[720];
    snprintf(moved, sizeof moved, "%s.away", shard);
    rename(shard, moved);
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ESHARD, "missing shard");
    ok(strstr(err, "set-00001.ffr") && strstr(err, "missing"), "message names it: %s", err);
    rename(moved, shard);

    /* Swap in a valid shard of another dataset: same name, different index. */
    char other[600];
    snprintf(other, sizeof other, "%s/other.ffr", dir);
    ffr_writer_open(&w, other, NULL);
    ffr_writer_append(w, rec, 10, NULL, 0);
    ffr_writer_close(w);
    rename(shard, moved);
    rename(other, shard);
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ESHARD, "replaced shard");
    ok(strstr(err, "set-00001.ffr") && strstr(err, "altered"), "message names it: %s", err);
    rename(moved, shard);

    /* A payload byte flipped in a shard: open is cheap and passes; verify names record+shard. */
    size_t n;
    uint8_t *b = tu_slurp(shard, &n);
    b[4096 + 32 + 100] ^= 1;
    FILE *f = fopen(shard, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "flipped payload: open passes");
    is_int(ffr_reader_verify_all(r, NULL, NULL), 1, "flipped payload: verify finds it");
    ffr_reader_close(r);
    b[4096 + 32 + 100] ^= 1;
    f = fopen(shard, "wb");
    fwrite(b, 1, n - 1, f); /* and truncated */
    fclose(f);
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ETRUNC, "truncated shard");
    ok(strstr(err, "shard 1") && strstr(err, "set-00001.ffr"), "message names it: %s", err);
    free(b);

    snprintf(path, sizeof path, "%s/evil.ffr", dir);
    write_text(path, "# ffr manifest\nffr_manifest: 1\nrecords: 1\nshards:\n"
                     "  - file: ../x.ffr\n    bytes: 1\n    records: 1\n    index_hash: 0x1\n");
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ECORRUPT,
           "a shard path leaving the directory is refused");
    write_text(path, "# ffr manifest\nffr_manifest: 2\nrecords: 1\nshards: []\n");
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_EVERSION, "manifest version 2");
    write_text(path, "# ffr manifest\nffr_manifest: 1\nrecords: [unclosed\n");
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ECORRUPT, "broken YAML");
    write_text(path, "# ffr manifest\nffr_manifest: 1\nrecords: -1\nshards:\n  - file: a\n");
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ECORRUPT, "negative count");
}

/* Files that are not regular files, and one shard listed twice (issue 20). */
static void odd_files(const char *dir)
{
    char path[600], shard[700], moved[720];
    struct ffr_reader *r = NULL;
    /* a FIFO blocked open() for ever (ffr verify, yolo-train): the alarm ends a regression */
    snprintf(path, sizeof path, "%s/fifo.ffr", dir);
    ok(mkfifo(path, 0644) == 0, "mkfifo %s", path);
    alarm(60);
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ENOTREG,
           "a FIFO as the dataset: refused unopened");
    ok(strstr(err, "fifo.ffr") && strstr(err, "not a regular file"), "message names it: %s", err);
    is_int(ffr_reader_open(&r, dir, NULL, err, sizeof err), -EISDIR, "a directory: EISDIR");
    unlink(path);

    snprintf(path, sizeof path, "%s/odd.ffr", dir);
    ok(write_sharded(path) == 0, "sharded dataset odd.ffr written");
    snprintf(shard, sizeof shard, "%s/odd-00001.ffr", dir);
    snprintf(moved, sizeof moved, "%s.away", shard);
    rename(shard, moved);
    ok(mkfifo(shard, 0644) == 0, "shard 1 replaced by a FIFO");
    is_int(ffr_reader_open(&r, path, NULL, err, sizeof err), -FFR_ESHARD,
           "a FIFO shard: refused unopened");
    ok(strstr(err, "shard 1") && strstr(err, "not a regular file"), "message names it: %s", err);
    alarm(0);
    unlink(shard);
    rename(moved, shard);

    /* shard 0 listed twice, every field right: its records would be read twice per epoch */
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "the dataset opens");
    struct ffr_shard_info si;
    ffr_reader_shard(r, 0, &si);
    char text[1024], dup[600];
    const char *entry = "  - file: \"odd-00000.ffr\"\n    bytes: %" PRIu64 "\n    records: %" PRIu64
                        "\n    index_hash: 0x%016" PRIx64 "\n";
    char e1[256];
    snprintf(e1, sizeof e1, entry, si.file_size, si.count, si.index_hash);
    snprintf(text, sizeof text,
             "# ffr manifest\nffr_manifest: 1\nrecords: %" PRIu64 "\nshards:\n%s%s", 2 * si.count,
             e1, e1);
    ffr_reader_close(r);
    snprintf(dup, sizeof dup, "%s/dup.ffr", dir);
    write_text(dup, text);
    is_int(ffr_reader_open(&r, dup, NULL, err, sizeof err), -FFR_ESHARD, "a shard listed twice");
    ok(strstr(err, "shard 1") && strstr(err, "same file as shard 0"), "message names both: %s",
       err);
    /* the same file under another name (a hard link) is the same file */
    char link_path[700];
    snprintf(link_path, sizeof link_path, "%s/odd-alias.ffr", dir);
    ok(link(shard, link_path) == 0 || errno == EEXIST, "hard link to shard 1");
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "the dataset opens again");
    ffr_reader_shard(r, 1, &si);
    ffr_reader_close(r);
    char e2[256];
    snprintf(e1, sizeof e1, entry, si.file_size, si.count, si.index_hash);
    snprintf(e2, sizeof e2, "%s", e1);
    char *q = strstr(e2, "odd-00000.ffr");
    if (q) memcpy(q, "odd-alias.ffr", 13);
    q = strstr(e1, "odd-00000.ffr");
    if (q) memcpy(q, "odd-00001.ffr", 13);
    snprintf(text, sizeof text,
             "# ffr manifest\nffr_manifest: 1\nrecords: %" PRIu64 "\nshards:\n%s%s", 2 * si.count,
             e1, e2);
    write_text(dup, text);
    is_int(ffr_reader_open(&r, dup, NULL, err, sizeof err), -FFR_ESHARD,
           "a shard and a hard link to it");
    ok(strstr(err, "odd-alias.ffr") && strstr(err, "same file"), "message: %s", err);
    unlink(link_path);
    unlink(dup);

    /* A shard that is a symbolic link out of the directory is followed (docs/format.md 7): the
     * manifest cannot leave its directory, a link beside it is whoever wrote it; what it
     * reaches is still held to the manifest. */
    char outside[700];
    snprintf(outside, sizeof outside, "%s.moved-out", dir);
    ok(rename(shard, outside) == 0 && symlink(outside, shard) == 0,
       "shard 1 moved out of the directory, a link in its place");
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "the link is followed (%s)", err);
    ffr_reader_close(r);
    unlink(shard);
    rename(outside, shard);
}

int main(void)
{
    const char *dir = tu_tmpdir();
    if (!dir) return 99;
    flips_and_truncations(dir, 1, FFR_CODEC_ZSTD);
    flips_and_truncations(dir, 512, FFR_CODEC_RAW);
    named_errors(dir);
    manifests(dir);
    odd_files(dir);
    tu_rmtree(dir);
    return tap_done();
}
