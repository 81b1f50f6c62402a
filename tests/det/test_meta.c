/*
 * det's metadata: the writer's text parses back into the same fields and is a function of them
 * alone; the reader takes ultralytics' two forms of names; and it refuses, naming the key, what
 * is malformed or over a bound, in bounded memory, an alias bomb included (peak RSS is measured).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "det.h"
#include "tap.h"

static long peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void round_trip(void)
{
    char *names[] = { "person", "quote \" and \\ back", "tab\there", "caf\xc3\xa9", "" };
    const struct det_meta m = {
        .is_det = true,
        .nc = 5,
        .n_names = 5,
        .names = names,
        .size = 640,
        .split = "train2017",
        .format = DET_FORMAT_COCO,
        .interp = DET_INTERP_VAL,
        .round = DET_ROUND_CEIL,
        .codec = DET_CODEC_ZSTD,
        .zstd_level = -3,
        .sub_filter = true,
        .jpeg_quality = 0,
        .source = "/data/coco/annotations/instances_train2017.json",
        .counts = { 118287, 117266, 1021, 3, 4, 5, 860001, 7, 9 },
        .packer_version = "1.2.3",
        .drop_backgrounds = false,
        .segments = true,
        .boxes_from_segments = true,
    };
    char *t = NULL, *t2 = NULL;
    size_t n = 0, n2 = 0;
    ok(det_meta_write(&m, &t, &n) == 0 && t && n == strlen(t), "write (%zu bytes)", n);
    ok(t && strstr(t, "encoding: ffr-det-1\n") == t,
       "the first line is exactly 'encoding: ffr-det-1' (format.md 8)");
    struct det_meta p;
    char why[200] = "";
    const int rc = det_meta_parse(t, n, &p, why, sizeof why);
    ok(rc == 0 && p.is_det && same_str(p.encoding, DET_ENCODING), "parses back (%d %s)", rc, why);
    int names_ok = p.n_names == 5;
    for (uint32_t k = 0; names_ok && k < 5; k++)
        names_ok = same_str(p.names[k], names[k]);
    ok(names_ok, "every name back, quotes, backslash, a tab and UTF-8 included");
    ok(p.nc == 5 && p.size == 640 && same_str(p.split, "train2017") &&
           p.format == DET_FORMAT_COCO && p.interp == DET_INTERP_VAL && p.round == DET_ROUND_CEIL &&
           p.codec == DET_CODEC_ZSTD && p.zstd_level == -3 && p.sub_filter &&
           same_str(p.source, m.source),
       "nc, size, split, format, interp, round, codec, a negative zstd level, filter, source");
    ok(!memcmp(&p.counts, &m.counts, sizeof m.counts) && same_str(p.packer_version, "1.2.3") &&
           !p.drop_backgrounds && p.segments && p.boxes_from_segments,
       "counts and packer options");
    /* the parsed struct writes the same bytes: the text is a function of the fields alone */
    ok(det_meta_write(&p, &t2, &n2) == 0 && n2 == n && !memcmp(t, t2, n),
       "written again from the parsed fields: the same bytes");
    det_meta_free(&p);
    free(t), free(t2);

    const struct det_meta j = { .n_names = 1,
                                .names = names,
                                .codec = DET_CODEC_JPEG,
                                .jpeg_quality = 90,
                                .interp = DET_INTERP_TRAIN,
                                .format = DET_FORMAT_YOLO };
    ok(det_meta_write(&j, &t, &n) == 0 && det_meta_parse(t, n, &p, why, sizeof why) == 0 &&
           p.codec == DET_CODEC_JPEG && p.jpeg_quality == 90 && p.interp == DET_INTERP_TRAIN &&
           p.round == DET_ROUND_INT && p.format == DET_FORMAT_YOLO && same_str(p.split, ""),
       "jpeg quality, train interp, int round, an empty split");
    det_meta_free(&p);
    free(t);

    /* versions that a plain scalar would not give back: a lone '-' opens a sequence (a fuzzer
     * found it), edge spaces vanish, ':' and '#' end the scalar */
    static const char *const odd[] = { "-", "- 1", " 1.2", "1.2 ", "a: b", "1 #x", "", "-rc1" };
    for (size_t k = 0; k < sizeof odd / sizeof *odd; k++) {
        struct det_meta v = j;
        char version[16];
        snprintf(version, sizeof version, "%s", odd[k]);
        v.packer_version = version;
        t = t2 = NULL;
        int same = det_meta_write(&v, &t, &n) == 0 &&
                   det_meta_parse(t, n, &p, why, sizeof why) == 0 && p.is_det &&
                   same_str(p.packer_version ? p.packer_version : "", odd[k]) &&
                   det_meta_write(&p, &t2, &n2) == 0 && n2 == n && !memcmp(t, t2, n);
        ok(same, "packer version '%s' reads back as written (%s)", odd[k], why);
        det_meta_free(&p);
        free(t), free(t2);
    }
}

static int parses(const char *text, struct det_meta *p, char *why, size_t cap)
{
    return det_meta_parse(text, strlen(text), p, why, cap);
}

static void forms(void)
{
    struct det_meta p;
    char why[200];
    ok(parses("names: {0: person, 5: \"bus\", x: skipped, -1: no}\n", &p, why, sizeof why) == 0 &&
           p.n_names == 6 && same_str(p.names[0], "person") && !p.names[1] &&
           same_str(p.names[5], "bus") && !p.is_det && !p.encoding,
       "names as ultralytics' mapping: gaps NULL, keys that are no class passed over");
    det_meta_free(&p);
    ok(parses("encoding: ffr-rec-7\nnames: [a, b]\n", &p, why, sizeof why) == 0 && !p.is_det &&
           same_str(p.encoding, "ffr-rec-7") && p.n_names == 2,
       "another encoding: not a detection dataset, its keys read all the same");
    det_meta_free(&p);
    ok(parses("- just\n- a list\n", &p, why, sizeof why) == 0 && !p.is_det && p.n_names == 0,
       "a root that is no mapping: no keys");
    det_meta_free(&p);
    ok(det_meta_parse(NULL, 0, &p, why, sizeof why) == 0 && !p.is_det, "no metadata at all");
    ok(parses("encoding: ffr-det-1\ninterp: bicubic\nresize_round: floor\nfuture: 1\n", &p, why,
              sizeof why) == 0 &&
           p.is_det && p.interp == DET_INTERP_UNKNOWN && p.round == DET_ROUND_UNKNOWN,
       "values and keys this reader does not know read as UNKNOWN (format.md 8.3)");
    det_meta_free(&p);
    ok(parses("encoding: ffr-det-1\n", &p, why, sizeof why) == 0 && p.round == DET_ROUND_UNKNOWN &&
           p.interp == DET_INTERP_UNKNOWN,
       "a pack older than resize_round: UNKNOWN, not INT");
    det_meta_free(&p);
}

/* text must fail with -FFR_ECORRUPT and a why holding expect. */
static void refuses(const char *text, size_t len, const char *expect, const char *what)
{
    struct det_meta p;
    char why[300] = "";
    const long rss0 = peak_rss_kb();
    const int rc = det_meta_parse(text, len, &p, why, sizeof why);
    const long grew = peak_rss_kb() - rss0;
    ok(rc == -FFR_ECORRUPT && strstr(why, expect) && p.n_names == 0 && !p.names,
       "%s: refused ('%s'), nothing kept, peak RSS +%ld KB", what, why, grew);
    det_meta_free(&p);
}

static void hostile(void)
{
    refuses("names: [a, b\n", 12, "metadata is not YAML (line", "not YAML");
    refuses("nc: 20000000\n", 13, "metadata nc: 20000000 is over 65536", "nc: 20000000");
    refuses("nc: 2147483647\n", 15, "metadata nc: 2147483647 is over", "nc: 2^31-1");
    refuses("nc: -1\n", 7, "metadata nc: not a whole number", "a negative nc");
    refuses("size: big\n", 10, "metadata size: not a whole number", "size: big");
    refuses("counts: {found: 1e3}\n", 21, "metadata counts.found: not a whole number",
            "a count 1e3");
    refuses("names: {65536: x}\n", 18, "class 65536 is over 65535", "a class over 65535");
    refuses("names: [a, [b]]\n", 16, "class 1 is not a string", "a name that is a list");
    refuses("names: [\"a\\0b\"]\n", 16, "holds a NUL byte", "a name with a NUL");
    refuses("packer: {segments: maybe}\n", 26, "packer.segments: not true or false",
            "a boolean that is neither");

    /* one name over DET_NAME_MAX */
    size_t big = DET_NAME_MAX + 1, n = 0;
    char *t = malloc(big + 32);
    n = (size_t)sprintf(t, "names: [\"");
    memset(t + n, 'x', big);
    n += big;
    n += (size_t)sprintf(t + n, "\"]\n");
    refuses(t, n, "class 0's name is over 4096 bytes", "a 4097-byte name");
    free(t);

    /* The alias bomb: one 4000-byte scalar anchored, 20,000 aliases to it in names (a 150 KB
     * text naming 80 MB). The bound on all names' bytes stops it after 4,194 copies, in about
     * 16 MB; the RSS bound below leaves room for libyaml's nodes and the heap's slack. */
    const size_t scalar = 4000, aliases = 20000;
    t = malloc(scalar + aliases * 8 + 64);
    n = (size_t)sprintf(t, "names:\n  - &a \"");
    memset(t + n, 'y', scalar);
    n += scalar;
    n += (size_t)sprintf(t + n, "\"\n");
    for (size_t k = 0; k < aliases; k++)
        n += (size_t)sprintf(t + n, "  - *a\n");
    const long rss0 = peak_rss_kb();
    struct det_meta p;
    char why[300] = "";
    const int rc = det_meta_parse(t, n, &p, why, sizeof why);
    const long grew = peak_rss_kb() - rss0;
    ok(rc == -FFR_ECORRUPT && strstr(why, "over 16777216 bytes in all"),
       "an alias bomb (%zu-byte text naming %zu MB) refused: '%s'", n, scalar * aliases >> 20, why);
    /* 64 MiB: the bound's 16 MiB of copies plus libyaml and malloc; without ASan only (its
     * shadow and quarantine are most of the figure under it) */
#if defined(__SANITIZE_ADDRESS__)
    tap_diag("peak RSS +%ld KB (not bounded under ASan)", grew);
#else
    ok(grew < 64 * 1024, "peak RSS +%ld KB, under 64 MiB", grew);
#endif
    det_meta_free(&p);
    free(t);
}

static void writer_bounds(void)
{
    char *t = (char *)1;
    size_t n;
    char *long_name = malloc(DET_NAME_MAX + 2);
    memset(long_name, 'z', DET_NAME_MAX + 1);
    long_name[DET_NAME_MAX + 1] = '\0';
    char *names[] = { long_name };
    struct det_meta m = { .n_names = 1, .names = names };
    ok(det_meta_write(&m, &t, &n) == -EINVAL && !t, "the writer refuses a name the reader would");
    m.n_names = DET_CLASS_MAX + 2;
    ok(det_meta_write(&m, &t, &n) == -EINVAL, "and 65537 classes");
    free(long_name);
    ok(!strcmp(det_interp_name(DET_INTERP_LINEAR), "linear") &&
           !strcmp(det_interp_name((enum det_interp)99), ""),
       "det_interp_name, an unknown value included");
}

int main(void)
{
    round_trip();
    forms();
    hostile();
    writer_bounds();
    return tap_done();
}
