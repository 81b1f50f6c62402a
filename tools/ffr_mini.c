/*
 * ffr-mini: a second, independent reader of the ffr record format (style guide rule 21).
 *
 * Written from docs/format.md alone, never from ffr/, so that the spec is shown to be complete
 * enough to implement and the two readers can be checked against each other. It maps the file
 * and checks every rule the spec states: header (section 3), trailer (6), index (5), records (4),
 * and the detection sample (8) when the metadata has the line `encoding: ffr-det-1`. It is a
 * verifier, so it is stricter than an open: all three trailer slots must be good and identical,
 * and every byte that is not a field or hashed data must be zero (section 2's exact layout).
 * A manifest (7) is read line by line in the subset section 7 defines, not as full YAML.
 *
 * Output, one line per record: number raw_len xxh3(raw bytes) summary_len xxh3(summary), then
 * "records N" and "metadata LEN xxh3". Exit 0 when valid, 1 on the first failed check (named on
 * stderr with the spec's error code), 2 on bad usage.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *cur_path; /* the file being checked, named in every message */

_Noreturn static void fail(const char *code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ffr-mini: %s: ", cur_path);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s)\n", code);
    exit(1);
}

#define CHECK(cond, code, ...)                \
    do {                                      \
        if (!(cond)) fail(code, __VA_ARGS__); \
    } while (0)

#define REC "record %" PRIu64 ": " /* message prefixes, followed by the number */
#define ROW "index row %" PRIu64 ": "
#define BAD "FFR_ECORRUPT" /* the code of most checks */

static uint64_t le(const uint8_t *p, int n) /* section 1: little-endian, n bytes */
{
    uint64_t v = 0;
    while (n--)
        v = v << 8 | p[n];
    return v;
}

static float le_f32(const uint8_t *p)
{
    const uint32_t u = (uint32_t)le(p, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int zero(const uint8_t *p, uint64_t n)
{
    while (n--)
        if (*p++) return 0;
    return 1;
}

static uint64_t up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* Whether the metadata text has `want` as a whole line (how section 8.3 marks a detection set). */
static int has_line(const uint8_t *text, uint64_t len, const char *want)
{
    const size_t wl = strlen(want);
    for (uint64_t at = 0; at + wl <= len;) {
        if (!memcmp(text + at, want, wl) && (at + wl == len || text[at + wl] == '\n')) return 1;
        const uint8_t *nl = memchr(text + at, '\n', len - at);
        if (!nl) break;
        at = (uint64_t)(nl - text) + 1;
    }
    return 0;
}

/* Section 8: a detection sample `s` (raw bytes) and the summary the index holds for it. */
static void det_check(uint64_t i, const uint8_t *s, uint64_t len, const uint8_t *sum, uint64_t sl)
{
    CHECK(len >= 4 && !memcmp(s, "YDET", 4), "FFR_EBADMAGIC", REC "not a detection sample", i);
    CHECK(len >= 64, BAD, REC "shorter than the 64-byte sample header", i);
    const uint64_t version = le(s + 4, 2), hs = version == 1 ? 64 : 72; /* header size H */
    CHECK(version == 1 || version == 2, "FFR_EVERSION", REC "sample version %" PRIu64, i, version);
    CHECK(len >= hs, BAD, REC "shorter than the %" PRIu64 "-byte sample header", i, hs);
    const uint64_t h = le(s + 8, 4), w = le(s + 12, 4), pix = le(s + 24, 4), nl = le(s + 28, 4);
    const uint64_t np = le(s + 32, 4), name_len = le(s + 36, 4);
    CHECK(s[6] <= 2 && s[7] == 3 && h && w && zero(s + 48, hs - 48), BAD,
          REC "bad pixel_format, channels, h, w or reserved bytes", i);
    CHECK(s[6] == 2 ? pix >= 1 : h * w <= UINT32_MAX && h * w * 3 == pix, BAD,
          REC "pixel_bytes is not h*w*3 (RGB8) or >= 1 (JPEG)", i);
    const uint64_t lab = up(hs + pix, 4), counts = lab + 20 * nl;
    const uint64_t pts = counts + (np ? 4 * nl : 0), name = pts + 8 * np;
    CHECK(name + name_len == len && zero(s + hs + pix, lab - hs - pix), BAD,
          REC "sample sizes do not add up to raw_len %" PRIu64 " or padding is not zero", i, len);
    for (uint64_t k = 0; k < nl; k++) {
        const uint8_t *row = s + lab + 20 * k;
        const float c = le_f32(row);
        CHECK(c >= 0 && c <= 65535 && c == (float)(uint32_t)c, BAD,
              REC "label %" PRIu64 ": class is not a whole number in [0, 65535]", i, k);
        for (int j = 1; j < 5; j++)
            CHECK(isfinite(le_f32(row + 4 * j)), BAD, REC "label %" PRIu64 ": not finite", i, k);
    }
    uint64_t total = 0;
    for (uint64_t k = 0; np && k < nl; k++)
        total += le(s + counts + 4 * k, 4);
    CHECK(total == np, BAD, REC "points per label do not sum to n_points", i);
    for (uint64_t k = 0; k < 2 * np; k++)
        CHECK(isfinite(le_f32(s + pts + 4 * k)), BAD, REC "polygon point not finite", i);
    CHECK(!memchr(s + name, 0, name_len), BAD, REC "NUL in file name", i);
    CHECK(sl == 20 + 20 * nl && !memcmp(sum, s + 8, 16) && le(sum + 16, 4) == nl &&
              !memcmp(sum + 20, s + lab, 20 * nl),
          BAD, REC "index summary differs from the sample", i);
}

static int locator_good(const uint8_t *p) /* section 6: magic and locator_hash */
{
    return !memcmp(p, "FFRTAIL1", 8) && XXH3_64bits(p, 56) == le(p + 56, 8);
}

/* What a manifest compares a shard against, and what main prints at the end. */
struct mini_info {
    uint64_t records, size, index_hash, meta_len, meta_hash;
};

/* Checks one record file and prints its records, numbered from `base`. */
static void check_file(const char *file, uint64_t base, struct mini_info *out)
{
    cur_path = file;
    const int fd = open(file, O_RDONLY);
    CHECK(fd >= 0, "errno", "cannot open: %s", strerror(errno));
    struct stat st;
    CHECK(fstat(fd, &st) == 0, "errno", "cannot stat: %s", strerror(errno));
    const uint64_t size = (uint64_t)st.st_size;
    const uint8_t *f = (const uint8_t *)"";
    if (size) f = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(f != MAP_FAILED, "errno", "cannot map: %s", strerror(errno));
    close(fd);

    /* Section 3: header, checked in the spec's order (a newer header may keep its hash
     * elsewhere, so the version comes before the hash). */
    static const uint8_t magic[8] = { 0x89, 'F', 'F', 'R', '\r', '\n', 0x1a, '\n' };
    if (size < 8 || memcmp(f, magic, 8)) {
        CHECK(size >= 8 || memcmp(f, magic, size), "FFR_ETRUNC", "cut short inside the magic");
        const uint64_t n = size >= 12 ? le(f + 4, 8) : 0; /* HFAI: u32 crc, u64 n, n u32, n u64 */
        CHECK(!(n >= 1 && n <= (size - 12) / 12 && le(f + 12 + 4 * n, 8) == 12 + 12 * n),
              "FFR_EFOREIGN", "an HFAI FFRecord file, not an ffr file");
        fail("FFR_EBADMAGIC", "bad magic: not an ffr file");
    }
    CHECK(size >= 64, "FFR_ETRUNC", "shorter than the 64-byte header");
    const uint64_t version = le(f + 8, 4), flags = le(f + 12, 4), align = le(f + 16, 4);
    CHECK(version == 1, "FFR_EVERSION", "format version %" PRIu64 ", this reader knows 1", version);
    CHECK(XXH3_64bits(f, 56) == le(f + 56, 8), "FFR_ECHECKSUM", "header hash mismatch");
    CHECK(flags == 0, "FFR_EFLAGS", "unknown flags 0x%" PRIx64, flags);
    CHECK(align >= 1 && align <= 1u << 20 && !(align & (align - 1)), BAD,
          "header: align %" PRIu64 " is not a power of two in [1, 2^20]", align);
    const uint64_t hsize = up(64, align);
    CHECK(le(f + 20, 4) == hsize && zero(f + 24, 32), BAD,
          "header: header_size is not up(64) or reserved bytes are not zero");
    CHECK(size >= hsize + 1536, "FFR_ETRUNC", "too short for header and trailer");
    CHECK(zero(f + 64, hsize - 64), BAD, "header padding is not zero");

    /* Section 6: trailer, three 512-byte slots holding the same 64-byte locator. */
    const uint64_t toff = size - 1536;
    const uint8_t *tail = f + toff, *loc = NULL;
    for (int s = 2; s >= 0; s--)
        if (locator_good(tail + 512 * s)) loc = tail + 512 * s;
    CHECK(loc, "FFR_ETRUNC", "no valid trailer locator: file cut short, appended to or damaged");
    CHECK(le(loc + 48, 8) == size, "FFR_ETRUNC",
          "file is %" PRIu64 " bytes, its trailer says %" PRIu64, size, le(loc + 48, 8));
    for (int s = 0; s < 3; s++) { /* opening needs one good copy; a verifier wants all three */
        CHECK(locator_good(tail + 512 * s), "FFR_ECHECKSUM", "trailer copy %d is damaged", s);
        CHECK(!memcmp(tail + 512 * s, loc, 64) && zero(tail + 512 * s + 64, 448), BAD,
              "trailer copy %d differs from copy 0 or its padding is not zero", s);
    }
    CHECK(le(loc + 8, 4) == version && le(loc + 12, 4) == flags, BAD,
          "trailer version/flags differ from the header's");
    const uint64_t ioff = le(loc + 16, 8), isize = le(loc + 24, 8), n = le(loc + 32, 8);
    CHECK(ioff >= hsize && ioff <= toff && isize <= toff - ioff && up(ioff + isize, 512) == toff,
          BAD,
          "trailer: index at %" PRIu64 " + %" PRIu64 " does not end in the 512-byte sector "
          "before the trailer",
          ioff, isize);
    CHECK(zero(f + ioff + isize, toff - ioff - isize), BAD,
          "padding before the trailer is not zero");
    CHECK(XXH3_64bits(f + ioff, isize) == le(loc + 40, 8), "FFR_ECHECKSUM", "index hash mismatch");

    /* Section 5: index header, rows, summary heap, metadata. */
    const uint8_t *ix = f + ioff;
    CHECK(isize >= 64 && !memcmp(ix, "FFRINDEX", 8), BAD, "index: bad magic");
    const uint64_t heap = le(ix + 16, 8), meta = le(ix + 24, 8);
    CHECK(le(ix + 8, 8) == n, BAD, "index record_count differs from the trailer's");
    CHECK(le(ix + 32, 4) == 32 && zero(ix + 36, 28), BAD,
          "index: row_size is not 32 or reserved bytes are not zero");
    CHECK(n <= (isize - 64) / 32 && heap <= isize - 64 - 32 * n &&
              meta == isize - 64 - 32 * n - heap,
          BAD, "index: 64 + 32*N + heap_size + meta_size != index_size");
    CHECK(heap <= UINT32_MAX && (n || !heap), BAD, "index: heap over 2^32-1 bytes or no records");
    const uint8_t *rows = ix + 64, *hp = rows + 32 * n, *mt = hp + heap;
    const int det = has_line(mt, meta, "encoding: ffr-det-1");

    /* Sections 2 and 4: frame i starts at up(end of frame i-1), the first at header_size. */
    uint64_t next = hsize;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *r = rows + 32 * i;
        const uint64_t slen = le(r + 8, 4), rlen = le(r + 12, 4), codec = r[28];
        const uint64_t s0 = le(r + 24, 4), s1 = i + 1 < n ? le(r + 32 + 24, 4) : heap;
        CHECK(le(r, 8) == next, BAD, ROW "frame offset %" PRIu64 ", the layout puts it at %" PRIu64,
              i, le(r, 8), next);
        CHECK(codec <= 1 && zero(r + 29, 3) && (codec || rlen == slen), BAD,
              ROW "unknown codec, nonzero reserved bytes or raw_len != stored_len", i);
        CHECK((i || s0 == 0) && s0 <= s1 && s1 <= heap, BAD,
              ROW "summary offsets not non-decreasing from 0 within heap_size", i);
        CHECK(next + 32 + slen <= ioff, BAD, ROW "frame runs into the index", i);
        const uint8_t *const fr = f + next;
        CHECK(!memcmp(fr, "REC1", 4) && (XXH3_64bits(fr, 28) & 0xffffffffu) == le(fr + 28, 4), BAD,
              REC "bad frame magic or frame_hash", i);
        CHECK(fr[4] == codec && zero(fr + 5, 3) && le(fr + 8, 4) == slen &&
                  le(fr + 12, 4) == rlen && le(fr + 16, 8) == le(r + 16, 8) &&
                  le(fr + 24, 4) == (i & 0xffffffffu),
              BAD, REC "frame header disagrees with its index row", i);
        CHECK(XXH3_64bits(fr + 32, slen) == le(r + 16, 8), "FFR_ECHECKSUM",
              REC "data hash mismatch", i);
        const uint64_t end = next + 32 + slen;
        next = up(end, align);
        CHECK(zero(f + end, next - end), BAD, REC "padding after the frame is not zero", i);

        const uint8_t *raw = fr + 32;
        uint8_t *buf = NULL;
        if (codec == 1) { /* one regular zstd frame, no dictionary, declaring raw_len */
            CHECK(slen >= 4 && le(raw, 4) == 0xFD2FB528u &&
                      ZSTD_getFrameContentSize(raw, slen) == rlen &&
                      ZSTD_getDictID_fromFrame(raw, slen) == 0 &&
                      ZSTD_findFrameCompressedSize(raw, slen) == slen,
                  BAD, REC "not one zstd frame of content size %" PRIu64 " without dictionary", i,
                  rlen);
            buf = malloc(rlen ? rlen : 1);
            CHECK(buf, "ENOMEM", REC "out of memory", i);
            CHECK(ZSTD_decompress(buf, rlen, raw, slen) == rlen, BAD,
                  REC "zstd frame does not decode to raw_len bytes", i);
            raw = buf;
        }
        if (det) det_check(i, raw, rlen, hp + s0, s1 - s0);
        printf("%" PRIu64 " %" PRIu64 " %016" PRIx64 " %" PRIu64 " %016" PRIx64 "\n", base + i,
               rlen, (uint64_t)XXH3_64bits(raw, rlen), s1 - s0,
               (uint64_t)XXH3_64bits(hp + s0, s1 - s0));
        free(buf);
    }
    CHECK(next == ioff, BAD, "index_offset is not up(end of the last frame)");
    *out = (struct mini_info){ n, size, le(loc + 40, 8), meta, XXH3_64bits(mt, meta) };
}

/* Section 7's integers: decimal digits, or `0x` and 16 hex digits for index_hash. */
static uint64_t manifest_num(const char *val, int hex)
{
    const int prefix = hex && !strncmp(val, "0x", 2);
    const char *const digits = prefix ? val + 2 : val;
    const size_t nd = strspn(digits, hex ? "0123456789abcdefABCDEF" : "0123456789");
    errno = 0;
    const uint64_t v = strtoull(digits, NULL, hex ? 16 : 10);
    CHECK(!errno && nd && !digits[nd] && (!hex || (prefix && nd == 16)), BAD,
          "manifest: bad %s number '%s'", hex ? "0x + 16 hex digit" : "decimal", val);
    return v;
}

/* One shard entry: its file name and bytes, records, index_hash; `seen` has a bit per key. */
struct mini_shard {
    char file[256];
    uint64_t want[3];
    unsigned seen;
    dev_t dev; /* the file's identity, once opened */
    ino_t ino;
};

/* Section 7: a manifest in the block subset the spec defines, one `key: value` a line, values
 * plain or in double quotes, `#` after a space starting a comment. Returns the record count. */
static uint64_t check_manifest(const char *mpath, struct mini_info *last)
{
    static const char *const keys[] = { "file", "bytes", "records", "index_hash" };
    cur_path = mpath;
    FILE *const mf = fopen(mpath, "r");
    CHECK(mf, "errno", "cannot open: %s", strerror(errno));
    int ch;
    while ((ch = fgetc(mf)) != EOF) /* text: a NUL would end a line early below */
        CHECK(ch, BAD, "manifest: NUL byte (not text)");
    rewind(mf);
    char line[4096];
    uint64_t version = 0, total = 0, sum = 0;
    unsigned top_seen = 0, lineno = 0;
    struct mini_shard *sh = NULL;
    size_t ns = 0;
    while (fgets(line, sizeof line, mf)) {
        lineno++;
        CHECK(strchr(line, '\n') || feof(mf), BAD, "manifest line %u: too long", lineno);
        line[strcspn(line, "\r\n")] = 0;
        char *key = line + strspn(line, " ");
        int top = key == line;
        if (!strncmp(key, "- ", 2)) { /* a new shard entry */
            CHECK(top_seen & 4, BAD, "manifest line %u: entry before 'shards:'", lineno);
            sh = realloc(sh, ++ns * sizeof *sh);
            CHECK(sh, "ENOMEM", "out of memory");
            sh[ns - 1] = (struct mini_shard){ .seen = 0 };
            key += 2 + strspn(key + 2, " ");
            top = 0;
        }
        if (!*key || *key == '#') continue;
        const size_t kl = strspn(key, "abcdefghijklmnopqrstuvwxyz_");
        CHECK(kl && key[kl] == ':' && (!key[kl + 1] || key[kl + 1] == ' '), BAD,
              "manifest line %u: not 'key: value'", lineno);
        key[kl] = 0;
        char *val = key + kl + 1 + strspn(key + kl + 1, " "), *rest;
        if (*val == '"') { /* names hold no '"' or '\', so a quoted one has no escapes */
            rest = strchr(++val, '"');
            CHECK(rest, BAD, "manifest line %u: unterminated quote", lineno);
            *rest++ = 0;
        } else {
            rest = val;
            while (*rest && !(*rest == '#' && (rest == val || rest[-1] == ' ')))
                rest++;
            char *e = rest;
            while (e > val && e[-1] == ' ')
                e--;
            *e = 0;
        }
        rest += strspn(rest, " ");
        CHECK(!*rest || *rest == '#', BAD, "manifest line %u: text after the value", lineno);
        if (top) {
            static const char *const top_keys[] = { "ffr_manifest", "records", "shards" };
            for (unsigned k = 0; k < 3; k++) {
                if (strcmp(key, top_keys[k])) continue;
                CHECK(!(top_seen & 1u << k), BAD, "manifest line %u: '%s' twice", lineno, key);
                top_seen |= 1u << k;
                CHECK(k != 2 || !*val, BAD, "manifest line %u: 'shards:' takes a list", lineno);
                if (k == 1) total = manifest_num(val, 0);
                if (k == 0) version = manifest_num(val, 0); /* as the header's: 1 to known */
                CHECK(k || version == 1, "FFR_EVERSION",
                      "manifest version %" PRIu64 ", this reader knows 1", version);
            }
            continue;
        }
        CHECK(ns, BAD, "manifest line %u: '%s' outside a shard entry", lineno, key);
        struct mini_shard *const e = &sh[ns - 1];
        for (unsigned k = 0; k < 4; k++) {
            if (strcmp(key, keys[k])) continue;
            CHECK(!(e->seen & 1u << k), BAD, "manifest line %u: '%s' twice", lineno, key);
            e->seen |= 1u << k;
            if (k) e->want[k - 1] = manifest_num(val, k == 3);
            const size_t l = strlen(val);
            int plain = l && l <= 255 && strcmp(val, ".") && strcmp(val, "..");
            for (size_t j = 0; j < l; j++)
                plain &=
                    !strchr("/\\\"'#", val[j]) && (unsigned char)val[j] >= 0x20 && val[j] != 0x7f;
            CHECK(k || plain, BAD, "manifest line %u: '%s' is not a plain file name", lineno, val);
            if (!k) memcpy(e->file, val, l + 1);
        }
    }
    fclose(mf);
    CHECK(top_seen & 1, "FFR_EBADMAGIC", "manifest: no 'ffr_manifest:' key");
    CHECK(version == 1 && (top_seen & 2) && ns, BAD,
          "manifest: needs 'ffr_manifest: 1', 'records' and at least one shard");
    for (size_t k = 0; k < ns; k++) {
        CHECK(sh[k].seen == 15, BAD, "manifest: shard entry %zu lacks a key", k);
        CHECK(sum + sh[k].want[1] >= sum, BAD, "manifest: record counts overflow");
        sum += sh[k].want[1];
    }
    CHECK(sum == total, BAD, "manifest: records %" PRIu64 " is not the sum over shards %" PRIu64,
          total, sum);

    const char *slash = strrchr(mpath, '/'); /* shard names are relative to the manifest */
    uint64_t base = 0;
    for (size_t k = 0; k < ns; k++) {
        char shard[4096 + 256];
        snprintf(shard, sizeof shard, "%.*s%s", slash ? (int)(slash - mpath + 1) : 0, mpath,
                 sh[k].file);
        cur_path = mpath;
        struct stat st;
        CHECK(stat(shard, &st) == 0, "FFR_ESHARD", "shard '%s' is missing", shard);
        CHECK(S_ISREG(st.st_mode), "FFR_ESHARD", "shard '%s' is not a regular file", shard);
        sh[k].dev = st.st_dev, sh[k].ino = st.st_ino;
        for (size_t j = 0; j < k; j++) /* section 7: each file once */
            CHECK(sh[j].dev != st.st_dev || sh[j].ino != st.st_ino, "FFR_ESHARD",
                  "shard '%s' is the same file as shard %zu", shard, j);
        check_file(shard, base, last);
        cur_path = mpath;
        const uint64_t got[3] = { last->size, last->records, last->index_hash };
        static const char *const what[3] = { "bytes", "records", "index_hash" };
        for (int j = 0; j < 3; j++)
            CHECK(got[j] == sh[k].want[j], "FFR_ESHARD",
                  "shard %s: %s %" PRIu64 ", the manifest says %" PRIu64, shard, what[j], got[j],
                  sh[k].want[j]);
        base += last->records;
    }
    free(sh);
    return base;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        printf("usage: ffr-mini FILE\n"
               "Checks an ffr record file or manifest against docs/format.md and prints, per\n"
               "record: number raw_len xxh3(raw) summary_len xxh3(summary); then\n"
               "'records N' and 'metadata LEN xxh3'. Exit 0 valid, 1 invalid, 2 bad usage.\n");
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "ffr-mini: expected one FILE\nhint: ffr-mini --help\n");
        return 2;
    }
    /* section 7: never open what is not a regular file (a FIFO would block) */
    struct stat st;
    cur_path = argv[1];
    CHECK(stat(argv[1], &st) == 0, "errno", "cannot stat: %s", strerror(errno));
    CHECK(!S_ISDIR(st.st_mode), "errno", "is a directory");
    CHECK(S_ISREG(st.st_mode), "FFR_ENOTREG", "not a regular file");
    char head[14] = { 0 };
    FILE *const f = fopen(argv[1], "rb");
    const size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    struct mini_info info;
    const int manifest = (got == 14 && !memcmp(head, "# ffr manifest", 14)) ||
                         (got >= 13 && !memcmp(head, "ffr_manifest:", 13));
    const uint64_t n = manifest ? check_manifest(argv[1], &info) : 0;
    if (!manifest) check_file(argv[1], 0, &info);
    printf("records %" PRIu64 "\nmetadata %" PRIu64 " %016" PRIx64 "\n",
           manifest ? n : info.records, info.meta_len, info.meta_hash);
    return 0;
}
