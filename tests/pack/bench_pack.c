/*
 * Benchmark: yolo-pack's throughput against the physical limit of the job, the decode-only rate
 * of libjpeg-turbo on the same files with the same number of threads, measured side by side in
 * one run (each arm best of BENCH_REPS passes, default 3; the arms alternate pass by pass, so a
 * busy spell of the machine hits both). Decode-only is what cv2.imread does per file: open, read
 * (from the page cache: every file is read once first) and decode. The rate of decoding from
 * buffers already in memory is printed beside it, for reference.
 *
 * Also the CPU time per image of each arm (all threads, user + system, least of the passes): on
 * a busy machine the wall-clock ratio says how the machine was shared, the CPU ratio still says
 * what the job costs beyond decoding.
 *
 * For zstd a second limit is printed: read + decode + ZSTD_compress of the decoded pixels at the
 * packer's level, on the same files and threads (the physical limit of a job that compresses:
 * zstd on pixels costs more than decoding them, docs/benchmarks.md "Record codecs").
 *
 * The job has a second physical limit, the storage it writes to: a raw record is ~0.9 MB, so
 * decoding 2,000 images/s asks for 1.8 GB/s of writes, more than many disks sustain. The storage
 * arm writes as many bytes as the packer's output, to the same directory, as the packer does
 * (one thread, O_DIRECT, 4 MiB writes, fsync, rename), and times it: the job cannot beat
 * min(decode-only, storage), and the bench prints the ratio to that too, naming which binds.
 *
 * Usage: bench_pack DATASET_ROOT SPLIT THREADS [CODEC...]   (codecs: raw zstd jpeg; default all)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "dataset.h"
#include "image.h"
#include "packer.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of the whole process (every thread, user + system) so far. */
static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

struct files {
    uint8_t **data;
    size_t *len;
    const char **path;
    size_t n;
    atomic_size_t next;
    int read_files; /* 1: each thread opens and reads every file itself, as cv2.imread does */
    int zstd_level; /* != 0: also compress the decoded pixels at this level */
};

static void *decode_worker(void *arg)
{
    struct files *f = arg;
    struct pack_image_decoder *dec;
    pack_image_decoder_create(NULL, &dec);
    uint8_t *buf = NULL, *z = NULL;
    size_t cap = 0, zcap = 0;
    ZSTD_CCtx *zc = f->zstd_level ? ZSTD_createCCtx() : NULL;
    for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->n;) {
        struct pack_image im;
        if (!f->read_files) {
            pack_image_decode(dec, f->data[i], f->len[i], &im);
            continue;
        }
        const int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            if (fd >= 0) close(fd);
            continue;
        }
        if ((size_t)st.st_size > cap) {
            free(buf);
            cap = (size_t)st.st_size;
            buf = malloc(cap);
        }
        const ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
        close(fd);
        if (got <= 0 || pack_image_decode(dec, buf, (size_t)got, &im) < 0 || !zc) continue;
        const size_t n = (size_t)im.width * (size_t)im.height * 3;
        if (ZSTD_compressBound(n) > zcap) {
            free(z);
            zcap = ZSTD_compressBound(n);
            z = malloc(zcap);
        }
        if (z) ZSTD_compressCCtx(zc, z, zcap, im.pixels, n, f->zstd_level);
    }
    ZSTD_freeCCtx(zc);
    free(z);
    free(buf);
    pack_image_decoder_destroy(dec);
    return NULL;
}

/*
 * Writes `bytes` to a new file in `dir` the way yolo-pack's writer does (O_DIRECT where the file
 * system takes it, runs of 4 MiB, fsync, rename, fsync of the directory) and returns the seconds
 * it took; the file is removed afterwards, untimed. The buffer holds incompressible bytes, so a
 * storage layer that compresses or deduplicates cannot make this arm cheaper than the records.
 */
static double storage_only(const char *dir, uint64_t bytes, const uint8_t *buf, size_t run)
{
    char tmp[700], fin[700];
    snprintf(tmp, sizeof tmp, "%s/storage.tmp", dir);
    snprintf(fin, sizeof fin, "%s/storage.ffr", dir);
    unlink(fin);
    sync();
    const double t0 = now();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0) fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    for (uint64_t done = 0; done < bytes;) {
        const size_t n = bytes - done < run ? (size_t)(bytes - done + 4095) & ~(size_t)4095 : run;
        if (write(fd, buf, n) != (ssize_t)n) {
            close(fd);
            unlink(tmp);
            return -1;
        }
        done += n;
    }
    const int ok = fsync(fd) == 0 && close(fd) == 0 && rename(tmp, fin) == 0;
    const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    const double t = now() - t0;
    unlink(fin);
    return ok ? t : -1;
}

static double decode_only(struct files *f, int threads, int read_files)
{
    pthread_t th[256];
    atomic_store(&f->next, 0);
    f->read_files = read_files;
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
    f.path = calloc(f.n, sizeof *f.path);
    for (size_t i = 0; i < f.n; i++) {
        f.path[i] = pack_ds_get(ds, i)->image_path;
        FILE *fp = fopen(f.path[i], "rb");
        if (!fp) continue;
        fseek(fp, 0, SEEK_END);
        f.len[i] = (size_t)ftell(fp);
        rewind(fp);
        f.data[i] = malloc(f.len[i]);
        if (fread(f.data[i], 1, f.len[i], fp) != f.len[i]) f.len[i] = 0;
        fclose(fp);
    }
    const int reps =
        getenv("BENCH_REPS") && atoi(getenv("BENCH_REPS")) > 0 ? atoi(getenv("BENCH_REPS")) : 3;
    printf("%zu images from %s (%s), %d threads, best of %d per arm\n", f.n, argv[1], argv[2],
           threads, reps);
    const char *codecs[] = { "raw", "zstd", "jpeg" };
    const int nc = argc > 4 ? argc - 4 : 3;
    char out[600];
    snprintf(out, sizeof out, "%s/bench_pack.XXXXXX",
             getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/tmp");
    if (!mkdtemp(out)) return 1;
    char path[700];
    snprintf(path, sizeof path, "%s/out.ffr", out);
    FILE *devnull = fopen("/dev/null", "w");
    const size_t run = (size_t)4 << 20; /* the packer's PACK_RUN_BYTES */
    uint8_t *wbuf = aligned_alloc(4096, run);
    if (!wbuf) return 1;
    uint64_t x = 0x9e3779b97f4a7c15u; /* xorshift: incompressible, the same every run */
    for (size_t k = 0; k < run; k += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(wbuf + k, &x, 8);
    }
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
        double best_dec = 0, best_mem = 0, best_pack = 0, cpu_dec = 1e30, cpu_mem = 1e30,
               cpu_pack = 1e30, best_z = 0, cpu_z = 1e30, best_store = 0;
        uint64_t out_bytes = 0, packed = 1;
        for (int rep = 0; rep < reps; rep++) {
            if (po.codec == PACK_CODEC_ZSTD) {
                f.zstd_level = po.zstd_level;
                const double c0 = cpu_s();
                const double dz = decode_only(&f, threads, 1);
                const double cs = (cpu_s() - c0) / (double)f.n;
                if (cs < cpu_z) cpu_z = cs;
                if (dz > best_z) best_z = dz;
                f.zstd_level = 0;
            }
            double c0 = cpu_s();
            const double dm = decode_only(&f, threads, 0);
            double cs = (cpu_s() - c0) / (double)f.n;
            if (cs < cpu_mem) cpu_mem = cs;
            if (dm > best_mem) best_mem = dm;
            c0 = cpu_s();
            const double d = decode_only(&f, threads, 1);
            cs = (cpu_s() - c0) / (double)f.n;
            if (cs < cpu_dec) cpu_dec = cs;
            if (d > best_dec) best_dec = d;
            struct pack_result res;
            /* The previous pass's output goes first, untimed: renaming over it would make this
             * pass pay for freeing its 4 GB (0.5 s on ext4), which is not packing. */
            unlink(path);
            sync();
            const double t0 = now();
            c0 = cpu_s();
            if (pack_run(&po, &res, NULL) < 0) return 1;
            /* Whole-job time (scan, write, rename, fsync included), as a user sees it. */
            const double p = (double)res.packed / (now() - t0);
            cs = (cpu_s() - c0) / (double)(res.packed ? res.packed : 1);
            if (cs < cpu_pack) cpu_pack = cs;
            if (p > best_pack) best_pack = p;
            printf("            pass %d: yolo-pack %.1f img/s, appender writing %.0f%% of the run, "
                   "workers waiting for free slots %.0f%% of theirs\n",
                   rep + 1, p, res.seconds > 0 ? 100 * res.seconds_writing / res.seconds : 0.0,
                   100 * res.stalled);
            fflush(stdout);
            /* The output's bytes again, written alone (the packer's output removed first, as
             * the next pass would). */
            out_bytes = res.bytes_out;
            packed = res.packed ? res.packed : 1;
            unlink(path);
            const double ts = storage_only(out, out_bytes, wbuf, run);
            if (ts > 0 && (double)res.packed / ts > best_store)
                best_store = (double)res.packed / ts;
        }
        printf("codec %-5s  read+decode %7.1f img/s  yolo-pack %7.1f img/s  ratio %.2f  "
               "(decode from memory %7.1f img/s, ratio %.2f)\n"
               "            cpu ms/img: read+decode %.3f  from memory %.3f  yolo-pack %.3f  "
               "cpu ratio %.2f (from memory %.2f)\n",
               codec, best_dec, best_pack, best_pack / best_dec, best_mem, best_pack / best_mem,
               1e3 * cpu_dec, 1e3 * cpu_mem, 1e3 * cpu_pack, cpu_dec / cpu_pack,
               cpu_mem / cpu_pack);
        if (po.codec == PACK_CODEC_ZSTD)
            printf("            read+decode+zstd %d %7.1f img/s  ratio %.2f  cpu ms/img %.3f  "
                   "cpu ratio %.2f\n",
                   po.zstd_level, best_z, best_pack / best_z, 1e3 * cpu_z, cpu_z / cpu_pack);
        /* A job that compresses is held by decode + compression, not decoding alone. */
        const int z = po.codec == PACK_CODEC_ZSTD;
        const double cpu_limit = z ? best_z : best_dec;
        const int store_binds = best_store > 0 && best_store < cpu_limit;
        const double limit = store_binds ? best_store : cpu_limit;
        printf("            storage alone (%.2f GB, O_DIRECT 4 MiB writes + fsync) %7.1f img/s "
               "(%.0f MB/s)  ratio %.2f\n"
               "            job limit min(%s, storage) = %s: yolo-pack at %.2f of it\n",
               1e-9 * (double)out_bytes, best_store,
               1e-6 * best_store * (double)out_bytes / (double)packed,
               best_store > 0 ? best_pack / best_store : 0.0,
               z ? "read+decode+zstd" : "read+decode",
               store_binds ? "storage"
               : z         ? "read+decode+zstd"
                           : "read+decode",
               best_pack / limit);
    }
    fclose(devnull);
    free(wbuf);
    unlink(path);
    rmdir(out);
    for (size_t i = 0; i < f.n; i++)
        free(f.data[i]);
    free(f.data);
    free(f.len);
    free(f.path);
    pack_ds_destroy(ds);
    return 0;
}
