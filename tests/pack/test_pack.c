/*
 * yolo-pack end to end on a generated dataset with deliberately broken files (yolo-synth
 * --broken all): the program is run as a user runs it, then its output is checked through the
 * library: byte-identical output for -j1 and -j2, every record's labels equal the cleaned source
 * labels and its pixels equal the decoder's output for the source image, broken inputs reported
 * by name and counted, --strict and interrupted runs leave no output, shards and the raw and
 * JPEG codecs hold the same samples.
 * With ../shared present, the same checks run on coco128 (real COCO JPEGs); pixels of the decoder
 * equal OpenCV's on those images (image_opencv_coco128), so the packed pixels do too.
 * Usage: test_pack YOLO_SYNTH YOLO_PACK [SHARED_DIR]
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "dataset.h"
#include "det.h"
#include "ffr.h"
#include "image.h"
#include "packer.h"
#include "tap.h"

static char dir[256];

/* Runs a shell command; returns its exit status, with stderr kept in dir/stderr.txt. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4096], full[4700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >%s/stdout.txt 2>%s/stderr.txt", cmd, dir, dir);
    const int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = '\0';
    if (len) *len = (size_t)n;
    return b;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    const int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

static const char *stderr_text(void)
{
    static char *text;
    char p[300];
    free(text);
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    text = slurp(p, NULL);
    return text ? text : "";
}

/* Every record against the scan of the same split and a fresh decode of its source image. */
static void check_records(const char *ffr_path, const char *root, const char *what)
{
    struct ffr_reader *r;
    char err[512];
    if (!ok(ffr_reader_open(&r, ffr_path, NULL, err, sizeof err) == 0, "%s: opens (%s)", what, err))
        return;
    is_int(ffr_reader_verify_all(r, NULL, NULL), 0, "%s: verify finds no problem", what);
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.split = "train2017";
    struct pack_ds *ds;
    if (pack_ds_scan(root, &o, &ds, err, sizeof err) < 0) {
        ok(0, "scan: %s", err);
        ffr_reader_close(r);
        return;
    }
    struct pack_image_decoder *dec;
    pack_image_decoder_create(NULL, &dec);
    struct ffr_decoder *fd;
    ffr_decoder_create(&fd);
    uint8_t *buf = malloc(8u << 20), *px = malloc(8u << 20), *file = malloc(8u << 20);
    size_t bad_labels = 0, bad_pixels = 0, bad_summary = 0, matched = 0;
    size_t next_sample = 0;
    for (uint64_t i = 0; i < ffr_reader_count(r); i++) {
        const int64_t n = ffr_reader_read(r, fd, i, buf, 8u << 20);
        struct det_sample s;
        if (n < 0 || det_decode(buf, (size_t)n, &s) < 0) {
            bad_labels++;
            continue;
        }
        /* Records follow the scan's order, minus the images that failed to decode. */
        const struct pack_ds_sample *src = NULL;
        while (next_sample < pack_ds_count(ds)) {
            const struct pack_ds_sample *c = pack_ds_get(ds, next_sample++);
            const char *base = strrchr(c->image_path, '/');
            base = base ? base + 1 : c->image_path;
            if (strlen(base) == s.name_len && memcmp(base, s.name, s.name_len) == 0) {
                src = c;
                break;
            }
        }
        if (!src) {
            bad_labels++;
            continue;
        }
        matched++;
        if (s.n_labels != src->n_rows)
            bad_labels++;
        else
            for (uint32_t k = 0; k < s.n_labels; k++) {
                const float *l = s.labels + 5 * k;
                const struct pack_ds_row *row = &src->rows[k];
                if (l[0] != (float)row->cls || l[1] != row->cx || l[2] != row->cy ||
                    l[3] != row->w || l[4] != row->h)
                    bad_labels++;
            }
        if (s.pixel_format != DET_JPEG) {
            FILE *f = fopen(src->image_path, "rb");
            const size_t fl = f ? fread(file, 1, 8u << 20, f) : 0;
            if (f) fclose(f);
            struct pack_image img;
            if (pack_image_load(dec, 640, PACK_IMAGE_INTERP_AUTO_TRAIN, file, fl, &img) < 0 ||
                (uint32_t)img.width != s.w || (uint32_t)img.height != s.h ||
                det_pixels(&s, px, 8u << 20) != (int64_t)s.w * s.h * 3 ||
                memcmp(px, img.pixels, (size_t)s.w * s.h * 3) != 0 ||
                (uint32_t)img.src_width != s.w0 || (uint32_t)img.src_height != s.h0)
                bad_pixels++;
        }
        struct ffr_record_info info;
        struct det_summary sum;
        ffr_reader_info(r, i, &info);
        if (det_summary_decode(info.summary, info.summary_len, &sum) < 0 || sum.w != s.w ||
            sum.h != s.h || sum.n_labels != s.n_labels)
            bad_summary++;
    }
    is_int(matched, ffr_reader_count(r), "%s: every record matches a source image, in order", what);
    is_int(bad_labels, 0, "%s: labels equal the cleaned source labels", what);
    is_int(bad_pixels, 0, "%s: pixels equal the decoder's output for the source image", what);
    is_int(bad_summary, 0, "%s: index summaries agree with the records", what);
    free(buf);
    free(px);
    free(file);
    ffr_decoder_destroy(fd);
    pack_image_decoder_destroy(dec);
    pack_ds_destroy(ds);
    ffr_reader_close(r);
}

static uint64_t count_of(const char *path)
{
    struct ffr_reader *r;
    if (ffr_reader_open(&r, path, NULL, NULL, 0) < 0) return 0;
    const uint64_t n = ffr_reader_count(r);
    ffr_reader_close(r);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        printf("# usage: test_pack YOLO_SYNTH YOLO_PACK [SHARED_DIR]\n");
        return 99;
    }
    const char *synth = argv[1], *pack = argv[2];
    snprintf(dir, sizeof dir, "%s/packtest.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) return 99;
    char root[400], a[400], b[400], p[400];
    snprintf(root, sizeof root, "%s/synth", dir);
    if (!ok(run("%s %s --split train2017=40 --split val2017=8 --seed 3 --broken all", synth,
                root) == 0,
            "yolo-synth wrote a dataset with broken files"))
        return tap_done();

    snprintf(a, sizeof a, "%s/j1.ffr", dir);
    snprintf(b, sizeof b, "%s/j2.ffr", dir);
    is_int(run("%s %s --split train2017 -o %s -j 1 -q", pack, root, a), 0, "pack with -j 1");
    const char *e = stderr_text();
    ok(strstr(e, "broken-not-jpeg.jpg") && strstr(e, "broken-empty-image.jpg") &&
           strstr(e, "broken-bad-label-row.txt") && strstr(e, "broken-truncated-jpeg.jpg"),
       "warnings name the broken files");
    ok(strstr(e, "corrupt skipped") && strstr(e, "label rows dropped"), "a summary line");
    is_int(run("%s %s --split train2017 -o %s -j 2 -q", pack, root, b), 0, "pack with -j 2");
    ok(same_file(a, b), "-j 1 and -j 2 give byte-identical files");
    check_records(a, root, "zstd");
    snprintf(p, sizeof p, "%s/sub.ffr", dir);
    is_int(run("%s %s --split train2017 -o %s --filter sub --level 3 -q", pack, root, p), 0,
           "pack with the Sub filter");
    check_records(p, root, "sub+zstd");

    /* Metadata carries names, counts and options. */
    struct ffr_reader *r;
    ffr_reader_open(&r, a, NULL, NULL, 0);
    size_t ml;
    const char *meta = ffr_reader_metadata(r, &ml);
    char *m = strndup(meta, ml);
    ok(strstr(m, "encoding: ffr-det-1") && strstr(m, "split: \"train2017\"") &&
           strstr(m, "corrupt_skipped: 5") && strstr(m, "filter: none"),
       "metadata records encoding, split, counts and codec");
    free(m);
    ffr_reader_close(r);

    /* Raw and sharded outputs hold the same records. */
    snprintf(p, sizeof p, "%s/raw.ffr", dir);
    is_int(run("%s %s --split train2017 -o %s --codec raw --shard-size 4M -q", pack, root, p), 0,
           "pack raw into 4 MiB shards");
    struct ffr_reader *rs;
    ffr_reader_open(&rs, p, NULL, NULL, 0);
    ok(rs && ffr_reader_shard_count(rs) > 1, "several shards");
    ffr_reader_close(rs);
    check_records(p, root, "raw, sharded");

    snprintf(p, sizeof p, "%s/jpeg.ffr", dir);
    is_int(run("%s %s --split train2017 -o %s --codec jpeg --quality 90 -q", pack, root, p), 0,
           "pack as JPEG");
    is_int(count_of(p), count_of(a), "JPEG output has as many records");
    check_records(p, root, "jpeg");

    /* --strict: the first warning fails the run and nothing is left under the output name. */
    snprintf(p, sizeof p, "%s/strict.ffr", dir);
    is_int(run("%s %s --split train2017 -o %s --strict -q", pack, root, p), 1, "--strict fails");
    ok(access(p, F_OK) != 0, "--strict leaves no output file");
    snprintf(p, sizeof p, "%s/val.ffr", dir);
    is_int(run("%s %s --split val2017 -o %s --strict -q", pack, root, p), 0,
           "--strict passes on the clean val split");

    /* The library API on the same split: two workers, messages to /dev/null. */
    FILE *devnull = fopen("/dev/null", "w");
    struct pack_opts po;
    pack_opts_default(&po);
    po.input = root;
    po.ds.split = "train2017";
    po.threads = 2;
    po.log = devnull;

    /* A run's timings: each is written (the result starts as NaNs), the time spent writing lies
     * within the run, and the workers' wait for free slots is a fraction of their time. */
    {
        struct pack_opts to = po;
        snprintf(p, sizeof p, "%s/timed.ffr", dir);
        to.output = p;
        to.codec = PACK_CODEC_RAW;
        struct pack_result tr;
        memset(&tr, 0xff, sizeof tr);
        is_int(pack_run(&to, &tr, NULL), 0, "timed run packs");
        ok(tr.seconds > 0 && tr.seconds < 600, "run seconds %.3f", tr.seconds);
        ok(tr.seconds_writing > 0 && tr.seconds_writing <= tr.seconds,
           "seconds writing %.3f within the run's %.3f", tr.seconds_writing, tr.seconds);
        ok(tr.stalled >= 0 && tr.stalled <= 1, "workers' stalled share %.3f is a fraction",
           tr.stalled);
        unlink(p);
    }

    /* An interrupted run leaves nothing behind. */
    snprintf(p, sizeof p, "%s/stopped.ffr", dir);
    po.output = p;
    volatile int stop = 1;
    is_int(pack_run(&po, NULL, &stop), -EINTR, "a stopped run returns -EINTR");
    fclose(devnull);
    ok(access(p, F_OK) != 0, "and leaves no output file");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", dir);
    FILE *ls = popen(cmd, "r");
    int tmps = -1;
    if (ls && fscanf(ls, "%d", &tmps) != 1) tmps = -1;
    if (ls) pclose(ls);
    is_int(tmps, 0, "and no temporary file");

    /* Real data: coco128 (YOLO layout), when ../shared is there. */
    char coco[600];
    snprintf(coco, sizeof coco, "%s/datasets/coco128", argc == 4 ? argv[3] : "/nonexistent");
    if (access(coco, R_OK) == 0) {
        snprintf(p, sizeof p, "%s/coco128.ffr", dir);
        is_int(run("%s %s -o %s --size 640 -q", pack, coco, p), 0, "pack coco128");
        is_int(count_of(p), 128, "coco128: all 128 images packed");
        const char *summary = stderr_text();
        const char *line = strstr(summary, "yolo-pack: 128 found"); /* after the warnings */
        ok(line && strstr(line, "128 found, 128 packed (2 backgrounds), 0 corrupt skipped"),
           "coco128 summary line");
        if (!line) printf("# stderr: %.*s\n", (int)strcspn(summary, "\n"), summary);
        check_records(p, coco, "coco128");
    } else {
        printf("# SKIP coco128 checks: %s not found\n", coco);
    }

    /* Bad arguments. */
    is_int(run("%s %s", pack, root), 2, "missing -o: exit 2");
    is_int(run("%s %s -o x.ffr --codec lzma", pack, root), 2, "unknown codec: exit 2");
    is_int(run("%s %s/nowhere -o %s/x.ffr -q", pack, dir, dir), 1, "missing input: exit 1");
    ok(strstr(stderr_text(), "nowhere") != NULL, "the error names the input");

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return tap_done();
}
