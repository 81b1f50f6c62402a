/*
 * ffr: inspect, check and extract ffr record files (docs/format.md).
 *
 *   ffr info FILE [--json]          what a dataset holds, from its index alone
 *   ffr verify FILE [--json] [-q]   every checksum, and detection summaries against records
 *   ffr ls FILE [--limit N]         one line per record
 *   ffr cat FILE N                  a record's decoded bytes to stdout
 *   ffr export FILE N -o DIR        a detection record's image (lossless) and YOLO labels
 *   ffr show FILE N -o OUT          a detection record's image with its boxes drawn
 *   ffr bench FILE [options]        storage throughput, against loose JPEGs
 *
 * Exit codes: 0 success, 1 a problem with a file, 2 bad arguments.
 */
#include <stdio.h>
#include <string.h>

#include "ffr_tool.h"
#include "ffyolo_config.h"

static const struct ffrt_cmd commands[] = {
    { "info", "ffr info FILE [--json]",
      "Describes a record file or sharded dataset from its index alone (no record is read):\n"
      "records, shards, file bytes, stored and raw bytes, the compression ratio (raw/stored),\n"
      "records per codec, record sizes, alignment and the metadata text. For detection\n"
      "datasets (metadata 'encoding: ffr-det-1') also the classes with their label counts,\n"
      "images without labels (backgrounds) and the image size range, from the index\n"
      "summaries.\n\n"
      "  --json   print one JSON object instead (keys: file, records, shards, bytes,\n"
      "           stored_bytes, raw_bytes, ratio, codecs, record_bytes, stored_record_bytes,\n"
      "           align, files, encoding, detection, classes [{id, name, labels, images}],\n"
      "           labels, backgrounds, image_size, metadata)\n",
      ffrt_cmd_info },
    { "verify", "ffr verify FILE [--json] [--quiet] [--limit N]",
      "Checks every byte of every file: headers, each record's frame and checksum, padding\n"
      "and the trailer copies. For detection datasets also decodes each record and checks that\n"
      "its index summary (h, w, h0, w0, labels) equals the sample.\n"
      "Prints each problem (up to --limit, default 20; 0 = all), then the first bad record\n"
      "and the number of problems. Exit 0 when intact, 1 when anything is wrong or the file\n"
      "cannot be opened.\n\n"
      "  --json      print {\"ok\", \"records\", \"problems\", \"first\"} as one JSON object\n"
      "  -q, --quiet print nothing when intact, only the summary lines when not\n"
      "  --limit N   print at most N problems\n",
      ffrt_cmd_verify },
    { "ls", "ffr ls FILE [-n|--limit N]",
      "Lists records, one line each, after a '#' header line. Columns: record number, shard,\n"
      "offset, stored bytes, raw bytes, codec; for detection datasets also the stored image\n"
      "size HxW, the label count and the source file name (which needs a record read).\n\n"
      "  -n, --limit N   list only the first N records\n",
      ffrt_cmd_ls },
    { "cat", "ffr cat FILE N",
      "Writes record N's decoded bytes to stdout (binary). N counts from 0 across shards;\n"
      "negative N counts from the end (-1 is the last record).\n",
      ffrt_cmd_cat },
    { "export", "ffr export FILE N -o DIR [--format ppm|png] [--boxes]",
      "Writes detection record N's stored image exactly (lossless) and its labels into DIR\n"
      "(created if missing), named after the source image: DIR/STEM.ppm (or .png) and\n"
      "DIR/STEM.txt; STEM is the record number when the sample has no usable name. JPEG\n"
      "records are written as stored, DIR/STEM.jpg. Labels are YOLO rows 'class cx cy w h';\n"
      "with segments, ultralytics segment rows 'class x1 y1 x2 y2 ...' (a label without a\n"
      "polygon gets its box's four corners). Prints the paths written. N as in ffr cat\n"
      "(-1 is the last record).\n\n"
      "  -o, --output DIR   where to write (required)\n"
      "  --format ppm|png   image format for RGB records (default ppm)\n"
      "  --boxes            write box rows even when the sample has segments\n",
      ffrt_cmd_export },
    { "show", "ffr show FILE N -o OUT.jpg|OUT.png [--quality Q]",
      "Draws detection record N's image with its boxes (and polygons) and class names,\n"
      "coloured per class with the YOLOv5 palette, and writes it as JPEG or PNG (by the\n"
      "extension of OUT). N as in ffr cat (-1 is the last record).\n\n"
      "  -o, --output OUT   output file, .jpg/.jpeg or .png (required)\n"
      "  --quality Q        JPEG quality 1..100 (default 95)\n",
      ffrt_cmd_show },
    { "bench",
      "ffr bench [FILE] [--mode random|seq] [--batch N] [--qd N] [--io auto|uring|pread|mmap]\n"
      "          [--direct|--buffered] [--verify] [--decompress] [--pixels] [--threads N]\n"
      "          [--seconds S] [--drop-cache] [--sqpoll] [--jpeg-baseline DIR [--size N]]\n"
      "          [--cache-dir DIR] [--json]",
      "Reads records as the trainer does: batches of record numbers (random, or sequential),\n"
      "each record's aligned extent read with the chosen engine into pinned memory, checked\n"
      "(--verify: xxh3) and decoded (--decompress: zstd; --pixels: also the detection\n"
      "sample's RGB pixels) as it lands, for S seconds (default 5) on N threads (one engine\n"
      "each). Prints MB/s (MB = 10^6 bytes, extent bytes read), records/s, and the p50/p99\n"
      "latency of a batch. O_DIRECT is the default where the file system allows it.\n"
      "--drop-cache asks the kernel to drop the files' cached pages first (posix_fadvise;\n"
      "enough for files written earlier, on any file system; for files larger than RAM use\n"
      "--direct).\n"
      "--jpeg-baseline DIR also reads the .jpg files under DIR the way a PyTorch data loader\n"
      "does (open, read, decode with libjpeg-turbo, resize so the long side is --size, default\n"
      "640) with the same threads and batch, and prints records/s over images/s as one ratio.\n"
      "FILE may be an http(s):// URL (range requests, docs/sharing.md): the remote arm.\n"
      "--cache-dir DIR fills a node-local cache from FILE (verified, atomic; ffr_cache) and\n"
      "reads the cached copy too: prints the local or remote arm, the cache fill, the cached\n"
      "arm and `ratio: cached / remote` (or local).\n\n"
      "  --batch N    records per batch (default 64)     --qd N   queue depth (default 32)\n"
      "  --sqpoll     an io_uring submission-polling thread (falls back, saying so)\n"
      "  --json       one object: mb_per_s, records_per_s, p50_ms, p99_ms, ... and\n"
      "               jpeg_baseline.images_per_s and ratio when both arms ran\n",
      ffrt_cmd_bench },
    { "serve", "ffr serve DIR [--host ADDR|*] [--port N] [--max-conns N]",
      "Serves the files of DIR over HTTP/1.1, read-only: GET and HEAD of\n"
      "http://ADDR:PORT/ffr/NAME with one byte range per request (what --cache-dir and\n"
      "ffr bench read), for a dataset's origin without a web server to set up. Names with a\n"
      "'/' or a leading '.' and anything not a regular file are not served. Runs until\n"
      "SIGINT or SIGTERM, then prints the requests and bytes served.\n\n"
      "  --host ADDR     address to listen on (default 127.0.0.1; * for every interface)\n"
      "  -p, --port N    port (default 0: any free one, printed)\n"
      "  --max-conns N   connections at once (default 64)\n",
      ffrt_cmd_serve },
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: ffr COMMAND [ARGS]   (ffr COMMAND --help for more)\n\ncommands:\n");
    for (size_t k = 0; k < N_COMMANDS; k++)
        fprintf(f, "  %s\n", commands[k].usage);
    fprintf(f, "\nExit status: 0 success, 1 a problem with a file, 2 bad arguments.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "ffr: missing command\nhint: ffr --help lists the commands\n");
        return FFRT_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        if (strcmp(name, "help") == 0 && argc > 2) {
            for (size_t k = 0; k < N_COMMANDS; k++)
                if (strcmp(argv[2], commands[k].name) == 0) {
                    printf("usage: %s\n\n%s", commands[k].usage, commands[k].help);
                    return FFRT_EXIT_OK;
                }
        }
        usage(stdout);
        return FFRT_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("ffr %s (format version %u)\n", FFYOLO_VERSION, FFR_FORMAT_VERSION);
        return FFRT_EXIT_OK;
    }
    for (size_t k = 0; k < N_COMMANDS; k++)
        if (strcmp(name, commands[k].name) == 0)
            return commands[k].run(&commands[k], argc - 1, argv + 1);
    fprintf(stderr, "ffr: unknown command '%s'\nhint: ffr --help lists the commands\n", name);
    return FFRT_EXIT_USAGE;
}
