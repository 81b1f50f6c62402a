/* yolo-pack: the command line over pack_run (packer.h). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "argparse.h"
#include "ffio.h"
#include "ffr.h"
#include "packer.h"

static volatile int stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* --shard-size SIZE: bytes with K, M, G, T (binary), at least 64K. */
static int parse_size(const char *v, void *dst, char *why, size_t cap)
{
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    double mul = 1;
    if (!errno && end != v && x > 0) {
        if (*end == 'K' || *end == 'k')
            mul = 1024.0, end++;
        else if (*end == 'M' || *end == 'm')
            mul = 1024.0 * 1024, end++;
        else if (*end == 'G' || *end == 'g')
            mul = 1024.0 * 1024 * 1024, end++;
        else if (*end == 'T' || *end == 't')
            mul = 1024.0 * 1024 * 1024 * 1024, end++;
        if (*end == 'i') end++;
        if (*end == 'B') end++;
        if (!*end && x * mul >= 65536 && x * mul < 1.8e19) {
            *(uint64_t *)dst = (uint64_t)(x * mul);
            return 0;
        }
    }
    snprintf(why, cap, "is not a shard size (e.g. 1G, 512M; at least 64K)");
    return -EINVAL;
}

/* --names: a file (yaml or text), else a comma-separated list. */
struct names_arg {
    const char *path;
    char **v;
    size_t n;
    char *buf; /* the list's copy, split in place */
};

static int parse_names(const char *v, void *dst, char *why, size_t cap)
{
    struct names_arg *N = dst;
    struct stat st;
    if (stat(v, &st) == 0) {
        N->path = v;
        return 0;
    }
    free(N->buf);
    free(N->v);
    N->v = NULL;
    N->n = 0;
    N->buf = strdup(v);
    if (!N->buf) {
        snprintf(why, cap, ": out of memory");
        return -ENOMEM;
    }
    char *save = NULL;
    for (char *tok = strtok_r(N->buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char **nn = realloc(N->v, (N->n + 1) * sizeof *nn);
        if (!nn) {
            snprintf(why, cap, ": out of memory");
            return -ENOMEM;
        }
        N->v = nn;
        N->v[N->n++] = tok;
    }
    return 0;
}

static void log_line(void *ctx, enum ffio_log_level level, const char *msg)
{
    (void)ctx, (void)level;
    fprintf(stderr, "yolo-pack: %s\n", msg);
}

/* -o s3://...: the upload's sink and the local staging directory the writer writes into. */
struct s3_out {
    char stage[4096];
    char path[4600];
    struct ffio_s3_sink *sink;
};

static int s3_out_open(struct s3_out *so, const char *url, const char *stage_parent)
{
    const char *base = strrchr(url, '/');
    if (!base || !base[1] || strchr(base + 1, '\'')) {
        fprintf(stderr, "yolo-pack: %s: not s3://BUCKET/[PREFIX/]NAME.ffr\n", url);
        return -EINVAL;
    }
    if (!stage_parent) stage_parent = getenv("TMPDIR");
    if (!stage_parent || !*stage_parent) stage_parent = "/tmp";
    snprintf(so->stage, sizeof so->stage, "%.4000s/yolo-pack-XXXXXX", stage_parent);
    if (!mkdtemp(so->stage)) {
        const int e = errno;
        fprintf(stderr, "yolo-pack: creating a staging directory in %s: %s\n", stage_parent,
                strerror(e));
        return -e;
    }
    snprintf(so->path, sizeof so->path, "%s/%s", so->stage, base + 1);
    struct ffio_http_opts ho;
    ffio_http_opts_default(&ho);
    ho.log = log_line;
    char err[2048];
    const int rc = ffio_s3_sink_open(&ho, url, &so->sink, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "yolo-pack: %s: %s\n", url, err);
        rmdir(so->stage);
    }
    return rc;
}

/* After the packing: the replaced dataset tidied (or, on failure, the upload undone), and the
 * staging directory removed. */
static int s3_out_close(struct s3_out *so, const char *url, int rc)
{
    if (rc == 0) {
        struct ffio_s3_sink_stats st;
        char err[2048];
        const int frc = ffio_s3_sink_finish(so->sink, &st, err, sizeof err);
        fprintf(stderr,
                "yolo-pack: uploaded %" PRIu64 " object(s), %.1f MB, to %s (%.1f s uploading, "
                "%.1f MB/s; the packing waited %.1f s for it)",
                st.files, (double)st.bytes / 1e6, url, st.upload_s,
                st.upload_s > 0 ? (double)st.bytes / 1e6 / st.upload_s : 0.0, st.wait_s);
        if (st.deleted || st.not_deleted)
            fprintf(stderr, "; %" PRIu64 " shard(s) of the replaced dataset deleted", st.deleted);
        fprintf(stderr, "\n");
        if (frc < 0) fprintf(stderr, "yolo-pack: warning: %s (the new dataset is complete)\n", err);
        if (st.unnamed)
            fprintf(stderr,
                    "yolo-pack: note: %" PRIu64 " object(s) beside it look like shards of this "
                    "dataset but no manifest names them (an interrupted upload's?); they were "
                    "left alone\n",
                    st.unnamed);
    } else {
        const char *why = ffio_s3_sink_error(so->sink);
        if (why && *why) fprintf(stderr, "yolo-pack: upload: %s\n", why);
        ffio_s3_sink_abort(so->sink);
        fprintf(stderr,
                "yolo-pack: %s: nothing committed (shards already uploaded deleted); a "
                "dataset there before is as it was\n",
                url);
    }
    if (rmdir(so->stage) < 0)
        fprintf(stderr, "yolo-pack: warning: removing the staging directory %s: %s\n", so->stage,
                strerror(errno));
    return rc;
}

/* The value of `name` among the choices' names ("a|b|c" order). */
static int choice_index(const char *choices, const char *name)
{
    int k = 0;
    for (const char *p = choices; *p; k++) {
        const char *e = strchr(p, '|');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (strlen(name) == n && !memcmp(p, name, n)) return k;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

int main(int argc, char **argv)
{
    struct pack_opts o;
    pack_opts_default(&o);
    o.progress = isatty(2);
    struct names_arg names = { 0 };
    const char *input = NULL, *format = "auto", *codec = "zstd", *filter = "none";
    const char *interp = "auto", *round = "int", *stage_dir = NULL;
    long size = o.size, threads = 0, level = o.zstd_level, quality = o.quality;
    long max_warnings = (long)o.max_warnings_shown, max_pixels = 0;
    bool quiet = false, strict = false, drop_bg = false, no_seg = false;
    bool seg_box = false;
    int n_pos = 0;
    static const char FORMATS[] = "auto|yolo|coco", CODECS[] = "zstd|raw|jpeg";
    static const char INTERPS[] = "auto|linear|area|val|train";
    const struct ap_opt opts[] = {
        AP_OPT("-o|--output", AP_STR, &o.output, "PATH",
               "output file (a manifest when --shard-size is given), or s3://BUCKET/KEY.ffr: "
               "each shard is uploaded as it is finished, the manifest last"),
        AP_OPT("--stage-dir", AP_STR, &stage_dir, "DIR",
               "-o s3://: where shards wait for their upload (default $TMPDIR or /tmp; room for "
               "three shards, or the whole file without --shard-size)"),
        AP_RANGE("--size", AP_LONG, &size, "N",
                 "long side in pixels (default 640; 0 keeps the original size)", 0, 16384),
        AP_OPT("--split", AP_STR, &o.ds.split, "NAME",
               "split to pack (default: the only one; 'train' for a yaml)"),
        { .names = "--format",
          .kind = AP_CHOICE,
          .dst = &format,
          .metavar = "F",
          .help = "auto|yolo|coco (default auto: YOLO labels win when both exist)",
          .choices = FORMATS },
        { .names = "--names",
          .kind = AP_CALL,
          .dst = &names,
          .metavar = "LIST|FILE",
          .help = "class names: comma-separated, or a yaml/text file",
          .call = parse_names },
        AP_OPT("--image-dir", AP_STR, &o.ds.image_dir, "DIR",
               "COCO: where the images are (default ROOT/SPLIT or ROOT/images/SPLIT)"),
        AP_RANGE("-j|--threads", AP_LONG, &threads, "N", "worker threads (default: all cores)", 1,
                 1024),
        AP_RANGE("--max-pixels", AP_LONG, &max_pixels, "N",
                 "largest image decoded, width x height (default 67108864 = 2^26); larger ones "
                 "are skipped, named. Images being decoded take at most 7 bytes a pixel of it "
                 "at once, whatever -j",
                 1, 4294967296.0),
        { .names = "--codec",
          .kind = AP_CHOICE,
          .dst = &codec,
          .metavar = "C",
          .help = "zstd (default), raw, or jpeg (lossy, see --quality)",
          .choices = CODECS },
        AP_RANGE("--level", AP_LONG, &level, "N",
                 "zstd level (default -1: fast to decode, see docs/benchmarks.md)", -7, 22),
        { .names = "--filter",
          .kind = AP_CHOICE,
          .dst = &filter,
          .metavar = "F",
          .help = "none (default) or sub: PNG's Sub filter before zstd, 1.4x smaller, half the "
                  "decode speed (for bandwidth-bound storage)",
          .choices = "none|sub" },
        AP_RANGE("--quality", AP_LONG, &quality, "Q", "JPEG quality for --codec jpeg (default 95)",
                 1, 100),
        { .names = "--interp",
          .kind = AP_CHOICE,
          .dst = &interp,
          .metavar = "I",
          .help = "auto (default: train for train splits, else val), val (area when shrinking, "
                  "linear when enlarging: val.py's; use it for validation packs of any split), "
                  "train (linear), linear or area",
          .choices = INTERPS },
        { .names = "--resize-round",
          .kind = AP_CHOICE,
          .dst = &round,
          .metavar = "R",
          .help = "int (default: int(w0 * r), as ultralytics v7.0) or ceil (math.ceil, as "
                  "ultralytics master after v7.0)",
          .choices = "int|ceil" },
        { .names = "--shard-size",
          .kind = AP_CALL,
          .dst = &o.shard_bytes,
          .metavar = "SIZE",
          .help = "write shards of at most SIZE bytes (K, M, G suffixes) + manifest",
          .call = parse_size },
        AP_OPT("--drop-backgrounds", AP_FLAG, &drop_bg, NULL, "leave out images without labels"),
        AP_OPT("--boxes-from-segments", AP_FLAG, &seg_box, NULL,
               "COCO: boxes from the polygons, as coco2017labels-segments"),
        AP_OPT("--no-segments", AP_FLAG, &no_seg, NULL, "do not store polygons"),
        AP_OPT("--strict", AP_FLAG, &strict, NULL, "any skipped file or dropped label is an error"),
        AP_RANGE("--max-warnings", AP_LONG, &max_warnings, "N",
                 "warnings printed in full (default 20; all are counted)", 0, 1000000000),
        AP_OPT("-q|--quiet", AP_FLAG, &quiet, NULL, "no progress bar"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = "yolo-pack",
        .usage = "INPUT -o OUT.ffr [options]",
        .about = "Packs a detection dataset into ffr record files: each record is the image "
                 "decoded and resized as ultralytics' load_image does (long side --size), with its "
                 "cleaned labels.\n\nINPUT: a dataset root (YOLO images/ + labels/, or COCO "
                 "annotations/instances_SPLIT.json), an ultralytics dataset yaml, a COCO json, an "
                 "image directory or an image list file.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .positional = &input,
        .max_positional = 1,
        .n_positional = &n_pos,
        .positional_name = "INPUT",
    };
    int rc = ap_parse(&sp, argc, argv);
    if (!rc && !input) rc = ap_usage_error(&sp, "missing INPUT");
    if (!rc && !o.output) rc = ap_usage_error(&sp, "missing -o OUT.ffr");
    if (rc) {
        free(names.buf);
        free(names.v);
        return rc == AP_HELPED ? 0 : rc;
    }
    static const int format_v[] = { PACK_DS_FORMAT_AUTO, PACK_DS_FORMAT_YOLO, PACK_DS_FORMAT_COCO };
    static const int codec_v[] = { PACK_CODEC_ZSTD, PACK_CODEC_RAW, PACK_CODEC_JPEG };
    static const int interp_v[] = { -1, PACK_IMAGE_INTERP_LINEAR, PACK_IMAGE_INTERP_AREA,
                                    PACK_IMAGE_INTERP_AUTO_VAL, PACK_IMAGE_INTERP_AUTO_TRAIN };
    o.input = input;
    o.size = (int)size;
    o.ds.format = format_v[choice_index(FORMATS, format)];
    o.codec = codec_v[choice_index(CODECS, codec)];
    o.interp = interp_v[choice_index(INTERPS, interp)];
    o.sub_filter = !strcmp(filter, "sub");
    o.round = !strcmp(round, "ceil") ? PACK_IMAGE_ROUND_CEIL : PACK_IMAGE_ROUND_INT;
    if (threads) o.threads = (int)threads;
    o.max_pixels = (uint64_t)max_pixels;
    o.zstd_level = (int)level;
    o.quality = (int)quality;
    o.max_warnings_shown = (size_t)max_warnings;
    o.ds.drop_backgrounds = drop_bg;
    o.ds.coco_boxes_from_segments = seg_box;
    if (no_seg) o.ds.keep_segments = false;
    o.strict = strict;
    if (quiet) o.progress = false;
    o.ds.names_path = names.path;
    o.ds.names = (const char *const *)names.v;
    o.ds.n_names = names.n;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct s3_out so = { 0 };
    const char *url = o.output;
    if (ffio_s3_is_url(url)) {
        if ((rc = s3_out_open(&so, url, stage_dir)) < 0) {
            free(names.buf);
            free(names.v);
            return 1;
        }
        o.output = so.path;
        o.output_name = url;
        o.publish = ffio_s3_sink_publish;
        o.taken = ffio_s3_sink_taken;
        o.sink = so.sink;
    }
    rc = pack_run(&o, NULL, &stop_flag);
    if (so.sink) rc = s3_out_close(&so, url, rc);
    free(names.buf);
    free(names.v);
    if (rc == -EINTR) {
        fprintf(stderr, "yolo-pack: interrupted; no output written\n");
        return 130;
    }
    return rc < 0 ? 1 : 0;
}
