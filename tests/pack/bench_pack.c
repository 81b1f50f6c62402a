/*
 * Benchmark: yolo-pack's throughput against the physical limit of the job, the decode-only rate
 * of libjpeg-turbo on the same files with the same number of threads, measured side by side in
 * one run (each arm best of 3). Files are read once first so both arms run from the page cache.
 * Usage: bench_pack DATASET_ROOT SPLIT THREADS [CODEC...]   (codecs: raw zstd jpeg; default all)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dataset.h"
#include "image.h"
#include "packer.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct files {
    uint8_t **data;
    size_t *len;
    size_t n;
    atomic_size_t next;
};

static void *decode_worker(void *arg)
{
    struct files *f = arg;
    struct pack_image_decoder *dec;
    pack_image_decoder_create(NULL, &dec);
    for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->n;) {
        struct pack_image im;
        pack_image_decode(dec, f->data[i], f->len[i], &im);
    }
    pack_image_decoder_destroy(dec);
    return NULL;
}

static double decode_only(struct files *f, int threads)
{
    pthread_t th[256];
    atomic_store(&f->next, 0);
    const double t0 = now();
    for (int k = 0; k < threads; k++)
        pthread_create(&th[k], NULL, decode_worker, f);
    for (int k = 0; k < threads; k++)
        pthread_join(th[k], NULL);
    return (double)f->n / (now() - t0);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_pack DATASET_ROOT SPLIT THREADS [raw|zstd|jpeg ...]\n");
        return 2;
    }
    const int threads = atoi(argv[3]);
    struct pack_ds_opts o;
    pack_ds_opts_default(&o);
    o.split = argv[2];
    struct pack_ds *ds;
    char err[512];
    if (pack_ds_scan(argv[1], &o, &ds, err, sizeof err) < 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    struct files f = { 0 };
    f.n = pack_ds_count(ds);
    f.data = calloc(f.n, sizeof *f.data);
    f.len = calloc(f.n, sizeof *f.len);
    for (size_t i = 0; i < f.n; i++) {
        FILE *fp = fopen(pack_ds_get(ds, i)->image_path, "rb");
        if (!fp) continue;
        fseek(fp, 0, SEEK_END);
        f.len[i] = (size_t)ftell(fp);
        rewind(fp);
        f.data[i] = malloc(f.len[i]);
        if (fread(f.data[i], 1, f.len[i], fp) != f.len[i]) f.len[i] = 0;
        fclose(fp);
    }
    printf("%zu images from %s (%s), %d threads, best of 3 per arm\n", f.n, argv[1], argv[2],
           threads);
    const char *codecs[] = { "raw", "zstd", "jpeg" };
    const int nc = argc > 4 ? argc - 4 : 3;
    char out[600];
    snprintf(out, sizeof out, "%s/bench_pack.XXXXXX",
             getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/tmp");
    if (!mkdtemp(out)) return 1;
    char path[700];
    snprintf(path, sizeof path, "%s/out.ffr", out);
    FILE *devnull = fopen("/dev/null", "w");
    for (int c = 0; c < nc; c++) {
        const char *codec = argc > 4 ? argv[4 + c] : codecs[c];
        struct pack_opts po;
        pack_opts_default(&po);
        po.input = argv[1];
        po.output = path;
        po.ds.split = argv[2];
        po.threads = threads;
        po.log = devnull;
        po.codec = !strcmp(codec, "raw")    ? PACK_CODEC_RAW
                   : !strcmp(codec, "jpeg") ? PACK_CODEC_JPEG
                                            : PACK_CODEC_ZSTD;
        double best_dec = 0, best_pack = 0;
        for (int rep = 0; rep < 3; rep++) {
            const double d = decode_only(&f, threads);
            if (d > best_dec) best_dec = d;
            struct pack_result res;
            const double t0 = now();
            if (pack_run(&po, &res, NULL) < 0) return 1;
            /* Whole-job time (scan, write, rename, fsync included), as a user sees it. */
            const double p = (double)res.packed / (now() - t0);
            if (p > best_pack) best_pack = p;
        }
        printf("codec %-5s  decode-only %7.1f img/s  yolo-pack %7.1f img/s  ratio %.2f\n", codec,
               best_dec, best_pack, best_pack / best_dec);
    }
    fclose(devnull);
    unlink(path);
    rmdir(out);
    for (size_t i = 0; i < f.n; i++)
        free(f.data[i]);
    free(f.data);
    free(f.len);
    pack_ds_destroy(ds);
    return 0;
}
