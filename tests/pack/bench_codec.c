/*
 * Benchmark: the record codecs on real photos (coco128 decoded and resized to 640 as yolo-pack
 * stores them), one core: compression ratio, encode and decode speed (decode = zstd + unfilter,
 * i.e. what the loader pays per image), for raw, zstd at several levels with and without the
 * Sub filter, and JPEG re-encoding. Prints a table for docs/benchmarks.md.
 * Usage: bench_codec COCO128_DIR
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "det.h"
#include "ffr.h"
#include "image.h"

#define MAXIMG 256

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct img {
    uint8_t *px;
    int w, h;
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_codec COCO128_DIR\n");
        return 2;
    }
    char dirp[1024];
    snprintf(dirp, sizeof dirp, "%s/images/train2017", argv[1]);
    DIR *d = opendir(dirp);
    if (!d) {
        printf("SKIP: %s not found\n", dirp);
        return 77;
    }
    static struct img imgs[MAXIMG];
    int n = 0;
    struct pack_image_decoder *dec;
    pack_image_decoder_create(NULL, &dec);
    uint8_t *file = malloc(16u << 20);
    for (struct dirent *e; (e = readdir(d)) && n < MAXIMG;) {
        if (!strstr(e->d_name, ".jpg")) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dirp, e->d_name);
        FILE *f = fopen(p, "rb");
        const size_t len = fread(file, 1, 16u << 20, f);
        fclose(f);
        struct pack_image im;
        if (pack_image_load(dec, 640, PACK_IMAGE_INTERP_AUTO_TRAIN, file, len, &im) < 0) continue;
        imgs[n].w = im.width;
        imgs[n].h = im.height;
        imgs[n].px = malloc((size_t)im.width * im.height * 3);
        memcpy(imgs[n].px, im.pixels, (size_t)im.width * im.height * 3);
        n++;
    }
    closedir(d);
    uint64_t raw_total = 0;
    for (int i = 0; i < n; i++)
        raw_total += (uint64_t)imgs[i].w * imgs[i].h * 3;
    printf("%d images, %.1f MB of RGB8 pixels at long side 640, one core\n\n", n, raw_total / 1e6);
    printf(
        "| scheme | ratio | encode MB/s | decode MB/s | decode img/s |\n|---|---|---|---|---|\n");

    struct ffr_codec *c;
    ffr_codec_create(&c);
    struct ffr_decoder *fd;
    ffr_decoder_create(&fd);
    uint8_t *filt = malloc(8u << 20), *stored = malloc(16u << 20), *out = malloc(8u << 20);
    static const struct {
        const char *name;
        int codec, level, sub;
    } schemes[] = {
        { "raw", FFR_CODEC_RAW, 0, 0 },
        { "zstd -20", FFR_CODEC_ZSTD, -20, 0 },
        { "zstd -5", FFR_CODEC_ZSTD, -5, 0 },
        { "zstd 1", FFR_CODEC_ZSTD, 1, 0 },
        { "zstd 3", FFR_CODEC_ZSTD, 3, 0 },
        { "sub + zstd -50", FFR_CODEC_ZSTD, -50, 1 },
        { "sub + zstd -20", FFR_CODEC_ZSTD, -20, 1 },
        { "sub + zstd -10", FFR_CODEC_ZSTD, -10, 1 },
        { "sub + zstd -5", FFR_CODEC_ZSTD, -5, 1 },
        { "sub + zstd -1", FFR_CODEC_ZSTD, -1, 1 },
        { "sub + zstd 1", FFR_CODEC_ZSTD, 1, 1 },
        { "sub + zstd 3", FFR_CODEC_ZSTD, 3, 1 },
    };
    char path[] = "/tmp/bench_codec.XXXXXX";
    const int tfd = mkstemp(path);
    if (tfd >= 0) close(tfd);
    uint8_t *jpeg = tjAlloc((int)tjBufSize(2048, 2048, TJSAMP_420));
    tjhandle tjc = tjInitCompress(), tjd = tjInitDecompress();
    for (size_t s = 0; s < sizeof schemes / sizeof schemes[0] + 1; s++) {
        const int is_jpeg = s == sizeof schemes / sizeof schemes[0];
        struct ffr_writer_opts wo;
        ffr_writer_opts_default(&wo);
        wo.durable = 0;
        struct ffr_writer *w;
        ffr_writer_open(&w, path, &wo);
        double enc = 0;
        uint64_t stored_total = 0;
        for (int i = 0; i < n; i++) {
            const size_t len = (size_t)imgs[i].w * imgs[i].h * 3;
            struct det_sample smp = {
                .h = (uint32_t)imgs[i].h,
                .w = (uint32_t)imgs[i].w,
                .h0 = 1,
                .w0 = 1,
                .pixels = imgs[i].px,
                .pixel_bytes = (uint32_t)len,
                .pixel_format = !is_jpeg && schemes[s].sub ? DET_RGB8_SUB : DET_RGB8,
            };
            const double t0 = now();
            if (is_jpeg) {
                unsigned long jl = tjBufSize(2048, 2048, TJSAMP_420);
                unsigned char *jp = jpeg;
                tjCompress2(tjc, imgs[i].px, imgs[i].w, 0, imgs[i].h, TJPF_RGB, &jp, &jl,
                            TJSAMP_420, 90, TJFLAG_NOREALLOC | TJFLAG_ACCURATEDCT);
                smp.pixel_format = DET_JPEG;
                smp.pixels = jp;
                smp.pixel_bytes = (uint32_t)jl;
            }
            const int64_t en = det_encode(&smp, filt, 8u << 20);
            int used;
            const int64_t sn = ffr_encode(c, stored, 16u << 20, filt, (size_t)en,
                                          is_jpeg ? FFR_CODEC_RAW : schemes[s].codec,
                                          is_jpeg ? 0 : schemes[s].level, &used);
            enc += now() - t0;
            stored_total += (uint64_t)sn;
            ffr_writer_append_encoded(w, used, stored, (size_t)sn, (size_t)en, NULL, NULL, 0);
        }
        ffr_writer_close(w);
        /* Decode as the loader does, from the page cache: read + verify + codec + pixels. */
        struct ffr_reader *r;
        ffr_reader_open(&r, path, NULL, NULL, 0);
        double dec_t = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            const double t0 = now();
            for (int i = 0; i < n; i++) {
                const int64_t got = ffr_reader_read(r, fd, (uint64_t)i, filt, 8u << 20);
                struct det_sample back;
                if (got < 0 || det_decode(filt, (size_t)got, &back) < 0) return 1;
                if (back.pixel_format == DET_JPEG) {
                    if (tjDecompress2(tjd, back.pixels, back.pixel_bytes, out, (int)back.w, 0,
                                      (int)back.h, TJPF_RGB, TJFLAG_ACCURATEDCT) != 0)
                        return 1;
                } else if (det_pixels(&back, out, 8u << 20) < 0) {
                    return 1;
                }
            }
            const double t = now() - t0;
            if (t < dec_t) dec_t = t;
        }
        ffr_reader_close(r);
        printf("| %s | %.2f | %.0f | %.0f | %.0f |\n",
               is_jpeg ? "jpeg q90 4:2:0 (lossy)" : schemes[s].name,
               (double)raw_total / (double)stored_total, raw_total / 1e6 / enc,
               raw_total / 1e6 / dec_t, n / dec_t);
    }
    unlink(path);
    tjFree(jpeg);
    tjDestroy(tjc);
    tjDestroy(tjd);
    return 0;
}
