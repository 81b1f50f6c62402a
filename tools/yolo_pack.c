/* yolo-pack: the command line over pack_run (packer.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ffr.h"
#include "packer.h"

static volatile int stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *f)
{
    fputs(
        "usage: yolo-pack INPUT -o OUT.ffr [options]\n"
        "\n"
        "Packs a detection dataset into ffr record files: each record is the image decoded and\n"
        "resized as ultralytics' load_image does (long side --size), with its cleaned labels.\n"
        "\n"
        "INPUT: a dataset root (YOLO images/ + labels/, or COCO "
        "annotations/instances_SPLIT.json),\n"
        "       an ultralytics dataset yaml, a COCO json, an image directory or an image list "
        "file.\n"
        "\n"
        "  -o, --output PATH       output file (a manifest when --shard-size is given)\n"
        "      --size N            long side in pixels (default 640; 0 keeps the original size)\n"
        "      --split NAME        split to pack (default: the only one; 'train' for a yaml)\n"
        "      --format F          auto|yolo|coco (default auto: YOLO labels win when both exist)\n"
        "      --names LIST|FILE   class names: comma-separated, or a yaml/text file\n"
        "      --image-dir DIR     COCO: where the images are (default ROOT/SPLIT or "
        "ROOT/images/SPLIT)\n"
        "  -j, --threads N         worker threads (default: all cores)\n"
        "      --codec C           zstd (default), raw, or jpeg (lossy, see --quality)\n"
        "      --level N           zstd level (default -1: fast to decode, see "
        "docs/benchmarks.md)\n"
        "      --filter F          none (default) or sub: PNG's Sub filter before zstd, 1.4x\n"
        "                          smaller, half the decode speed (for bandwidth-bound storage)\n"
        "      --quality Q         JPEG quality for --codec jpeg (default 95)\n"
        "      --interp I          auto (default: train for train splits, else val), val (area\n"
        "                          when shrinking, linear when enlarging: val.py's; use it for\n"
        "                          validation packs of any split), train (linear), linear or area\n"
        "      --resize-round R    int (default: int(w0 * r), as ultralytics v7.0) or ceil\n"
        "                          (math.ceil, as ultralytics master after v7.0)\n"
        "      --shard-size SIZE   write shards of at most SIZE bytes (K, M, G suffixes) + "
        "manifest\n"
        "      --drop-backgrounds  leave out images without labels\n"
        "      --boxes-from-segments  COCO: boxes from the polygons, as coco2017labels-segments\n"
        "      --no-segments       do not store polygons\n"
        "      --strict            any skipped file or dropped label is an error\n"
        "      --max-warnings N    warnings printed in full (default 20; all are counted)\n"
        "  -q, --quiet             no progress bar\n"
        "  -h, --help              this help\n",
        f);
}

static int bad_arg(const char *fmt, const char *a)
{
    fprintf(stderr, "yolo-pack: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'yolo-pack --help'.\n");
    return 2;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return -1;
    double mul = 1;
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
    if (*end) return -1;
    *out = (uint64_t)(v * mul);
    return *out >= 65536 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct pack_opts o;
    pack_opts_default(&o);
    o.progress = isatty(2);
    enum {
        O_SIZE = 256,
        O_SPLIT,
        O_FORMAT,
        O_NAMES,
        O_IMAGE_DIR,
        O_CODEC,
        O_LEVEL,
        O_NOFILTER,
        O_QUALITY,
        O_INTERP,
        O_ROUND,
        O_SHARD,
        O_DROPBG,
        O_NOSEG,
        O_STRICT,
        O_MAXW,
        O_SEGBOX,
    };
    static const struct option longs[] = {
        { "output", required_argument, 0, 'o' },
        { "size", required_argument, 0, O_SIZE },
        { "split", required_argument, 0, O_SPLIT },
        { "format", required_argument, 0, O_FORMAT },
        { "names", required_argument, 0, O_NAMES },
        { "image-dir", required_argument, 0, O_IMAGE_DIR },
        { "threads", required_argument, 0, 'j' },
        { "codec", required_argument, 0, O_CODEC },
        { "level", required_argument, 0, O_LEVEL },
        { "filter", required_argument, 0, O_NOFILTER },
        { "quality", required_argument, 0, O_QUALITY },
        { "interp", required_argument, 0, O_INTERP },
        { "resize-round", required_argument, 0, O_ROUND },
        { "shard-size", required_argument, 0, O_SHARD },
        { "drop-backgrounds", no_argument, 0, O_DROPBG },
        { "boxes-from-segments", no_argument, 0, O_SEGBOX },
        { "no-segments", no_argument, 0, O_NOSEG },
        { "strict", no_argument, 0, O_STRICT },
        { "max-warnings", required_argument, 0, O_MAXW },
        { "quiet", no_argument, 0, 'q' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };

    char **names = NULL;
    size_t n_names = 0;
    long v;
    int c;
    while ((c = getopt_long(argc, argv, "o:j:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'o':
            o.output = optarg;
            break;
        case O_SIZE:
            if (parse_int(optarg, 0, 16384, &v)) return bad_arg("bad --size '%s'", optarg);
            o.size = (int)v;
            break;
        case O_SPLIT:
            o.ds.split = optarg;
            break;
        case O_FORMAT:
            if (!strcmp(optarg, "auto"))
                o.ds.format = PACK_DS_FORMAT_AUTO;
            else if (!strcmp(optarg, "yolo"))
                o.ds.format = PACK_DS_FORMAT_YOLO;
            else if (!strcmp(optarg, "coco"))
                o.ds.format = PACK_DS_FORMAT_COCO;
            else
                return bad_arg("bad --format '%s' (auto, yolo or coco)", optarg);
            break;
        case O_NAMES: {
            struct stat st;
            if (stat(optarg, &st) == 0) {
                o.ds.names_path = optarg;
                break;
            }
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
                char **nn = realloc(names, (n_names + 1) * sizeof *names);
                if (!nn) return 1;
                names = nn;
                names[n_names++] = tok;
            }
            o.ds.names = (const char *const *)names;
            o.ds.n_names = n_names;
            break;
        }
        case O_IMAGE_DIR:
            o.ds.image_dir = optarg;
            break;
        case 'j':
            if (parse_int(optarg, 1, 1024, &v)) return bad_arg("bad -j '%s'", optarg);
            o.threads = (int)v;
            break;
        case O_CODEC:
            if (!strcmp(optarg, "zstd"))
                o.codec = PACK_CODEC_ZSTD;
            else if (!strcmp(optarg, "raw"))
                o.codec = PACK_CODEC_RAW;
            else if (!strcmp(optarg, "jpeg"))
                o.codec = PACK_CODEC_JPEG;
            else
                return bad_arg("bad --codec '%s' (zstd, raw or jpeg)", optarg);
            break;
        case O_LEVEL:
            if (parse_int(optarg, -7, 22, &v)) return bad_arg("bad --level '%s'", optarg);
            o.zstd_level = (int)v;
            break;
        case O_NOFILTER:
            if (!strcmp(optarg, "none"))
                o.sub_filter = false;
            else if (!strcmp(optarg, "sub"))
                o.sub_filter = true;
            else
                return bad_arg("bad --filter '%s' (none or sub)", optarg);
            break;
        case O_QUALITY:
            if (parse_int(optarg, 1, 100, &v)) return bad_arg("bad --quality '%s'", optarg);
            o.quality = (int)v;
            break;
        case O_INTERP:
            if (!strcmp(optarg, "auto"))
                o.interp = -1;
            else if (!strcmp(optarg, "linear"))
                o.interp = PACK_IMAGE_INTERP_LINEAR;
            else if (!strcmp(optarg, "area"))
                o.interp = PACK_IMAGE_INTERP_AREA;
            else if (!strcmp(optarg, "val"))
                o.interp = PACK_IMAGE_INTERP_AUTO_VAL;
            else if (!strcmp(optarg, "train"))
                o.interp = PACK_IMAGE_INTERP_AUTO_TRAIN;
            else
                return bad_arg("bad --interp '%s' (auto, val, train, linear or area)", optarg);
            break;
        case O_ROUND:
            if (!strcmp(optarg, "int"))
                o.round = PACK_IMAGE_ROUND_INT;
            else if (!strcmp(optarg, "ceil"))
                o.round = PACK_IMAGE_ROUND_CEIL;
            else
                return bad_arg("bad --resize-round '%s' (int or ceil)", optarg);
            break;
        case O_SHARD:
            if (parse_size(optarg, &o.shard_bytes))
                return bad_arg("bad --shard-size '%s' (e.g. 1G, 512M; at least 64K)", optarg);
            break;
        case O_DROPBG:
            o.ds.drop_backgrounds = true;
            break;
        case O_SEGBOX:
            o.ds.coco_boxes_from_segments = true;
            break;
        case O_NOSEG:
            o.ds.keep_segments = false;
            break;
        case O_STRICT:
            o.strict = true;
            break;
        case O_MAXW:
            if (parse_int(optarg, 0, 1000000000, &v))
                return bad_arg("bad --max-warnings '%s'", optarg);
            o.max_warnings_shown = (size_t)v;
            break;
        case 'q':
            o.progress = false;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "Try 'yolo-pack --help'.\n");
            return 2;
        }
    }
    if (optind != argc - 1)
        return bad_arg("%s", optind >= argc ? "missing INPUT" : "more than one INPUT");
    if (!o.output) return bad_arg("%s", "missing -o OUT.ffr");
    o.input = argv[optind];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    const int rc = pack_run(&o, NULL, &stop_flag);
    free(names);
    if (rc == -EINTR) {
        fprintf(stderr, "yolo-pack: interrupted; no output written\n");
        return 130;
    }
    return rc < 0 ? 1 : 0;
}
