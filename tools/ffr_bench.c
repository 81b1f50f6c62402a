/*
 * ffr bench: storage throughput of a record file through the trainer's data path (ffio engines,
 * batched reads into pinned memory, checksums and decoding as records land), and the baseline it
 * replaces: the same images as loose JPEG files, read, decoded and resized as a data loader does,
 * with the same number of threads, in the same run, so the gain is one printed ratio.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ffio.h"
#include "ffr_tool.h"
#include "image.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Buffers are carved at 4096-byte boundaries so O_DIRECT reads land without a bounce. */
static uint64_t ffr_round_up_4k(uint64_t x)
{
    return (x + 4095) & ~(uint64_t)4095;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct cfg {
    const struct ffrt_cmd *cmd;
    const struct ffr_reader *r;
    const char *url; /* remote arm: the dataset's URL (each worker opens its own client) */
    int random;
    uint64_t batch, qd, threads;
    double seconds;
    enum ffio_engine_kind engine;
    enum ffio_direct direct;
    int verify, decompress, pixels, sqpoll;
    uint64_t max_extent, max_raw, max_pixels;
    atomic_uint_fast64_t seq_next;
};

struct arm {
    uint64_t items, bytes, errors;
    double *lat; /* per batch, ms */
    size_t n_lat, cap_lat;
    char first_error[512];
    int fatal;
};

static void add_lat(struct arm *a, double ms)
{
    if (a->n_lat == a->cap_lat) {
        const size_t n = a->cap_lat ? 2 * a->cap_lat : 1024;
        double *p = realloc(a->lat, n * sizeof *p);
        if (!p) return;
        a->lat = p;
        a->cap_lat = n;
    }
    a->lat[a->n_lat++] = ms;
}

struct worker {
    struct cfg *c;
    struct arm a;
    uint64_t seed;
    char **files; /* JPEG arm */
    size_t n_files;
    int size;
};

/* Engine decisions (a fallback from io_uring, buffered reads where O_DIRECT is refused) are
 * printed once per run, not once per thread. */
static void io_log(void *ctx, enum ffio_log_level level, const char *msg)
{
    static atomic_int said_warn, said_info;
    (void)ctx;
    atomic_int *said = level == FFIO_LOG_WARN ? &said_warn : &said_info;
    if (level == FFIO_LOG_WARN && atomic_exchange(said, 1) == 0)
        fprintf(stderr, "ffr bench: %s\n", msg);
}

static void *ffr_worker(void *arg)
{
    struct worker *w = arg;
    struct cfg *c = w->c;
    struct ffio_records_opts o;
    ffio_records_opts_default(&o);
    o.io.engine = c->engine;
    o.io.direct = c->direct;
    o.io.queue_depth = (unsigned)c->qd;
    o.io.log = io_log;
    o.io.sqpoll = c->sqpoll;
    o.verify = c->verify;
    o.decode = c->decompress;
    struct ffio_records *rr;
    int rc = ffio_records_open(c->r, &o, &rr);
    if (rc < 0) {
        snprintf(w->a.first_error, sizeof w->a.first_error, "cannot start the %s engine: %s",
                 ffio_engine_kind_name(c->engine), ffio_strerror(rc));
        w->a.fatal = 1;
        return NULL;
    }
    const size_t ext = (size_t)ffr_round_up_4k(c->max_extent);
    const size_t raw = c->decompress ? (size_t)ffr_round_up_4k(c->max_raw) : 0;
    struct ffio_pinned pin;
    if (ffio_pinned_alloc(c->batch * (ext + raw) + (size_t)c->max_pixels + 4096, 0, &pin) < 0) {
        snprintf(w->a.first_error, sizeof w->a.first_error,
                 "out of memory for %" PRIu64 " record buffers", c->batch);
        w->a.fatal = 1;
        ffio_records_close(rr);
        return NULL;
    }
    uint8_t *pixels = (uint8_t *)pin.ptr + c->batch * (ext + raw);
    struct ffio_record_req *q = calloc(c->batch, sizeof *q);
    const uint64_t n = ffr_reader_count(c->r);
    const double end = now_s() + c->seconds;
    while (q && now_s() < end) {
        uint64_t first = 0;
        if (!c->random) first = atomic_fetch_add(&c->seq_next, c->batch) % n;
        for (uint64_t k = 0; k < c->batch; k++) {
            q[k] = (struct ffio_record_req){
                .index = c->random ? xorshift(&w->seed) % n : (first + k) % n,
                .extent = (uint8_t *)pin.ptr + k * ext,
                .extent_cap = ext,
                .dst = c->decompress ? (uint8_t *)pin.ptr + c->batch * ext + k * raw : NULL,
                .dst_cap = raw,
            };
        }
        const double t0 = now_s();
        rc = ffio_records_read(rr, q, c->batch);
        if (rc < 0) {
            snprintf(w->a.first_error, sizeof w->a.first_error, "engine failed: %s",
                     ffio_strerror(rc));
            w->a.fatal = 1;
            break;
        }
        for (uint64_t k = 0; k < c->batch; k++) {
            if (q[k].result < 0) {
                if (!w->a.errors++)
                    ffio_records_describe(rr, &q[k], w->a.first_error, sizeof w->a.first_error);
                w->a.fatal = 1; /* a benchmark of failing reads measures nothing */
                continue;
            }
            struct ffr_record_info in;
            ffr_reader_info(c->r, q[k].index, &in);
            w->a.bytes += in.extent_len;
            w->a.items++;
            if (c->pixels) {
                struct det_sample s;
                if (det_decode(q[k].payload, (size_t)q[k].result, &s) < 0 ||
                    det_pixels(&s, pixels, (size_t)c->max_pixels) < 0) {
                    if (!w->a.errors++)
                        snprintf(w->a.first_error, sizeof w->a.first_error,
                                 "record %" PRIu64 " is not a decodable detection sample",
                                 q[k].index);
                }
            }
        }
        add_lat(&w->a, 1e3 * (now_s() - t0));
        if (w->a.fatal) break;
    }
    free(q);
    ffio_pinned_free(&pin);
    ffio_records_close(rr);
    return NULL;
}

/* The remote arm: records over HTTP range requests (ffio_remote_*), one client per thread,
 * checked and decoded as they land, as ffr_worker does locally. */
static void *remote_worker(void *arg)
{
    struct worker *w = arg;
    struct cfg *c = w->c;
    struct ffio_http_opts ho;
    ffio_http_opts_default(&ho);
    ho.max_in_flight = (unsigned)(c->qd < 256 ? c->qd : 256);
    struct ffio_http *h = NULL;
    struct ffio_remote *rm = NULL;
    char err[512] = "";
    int rc = ffio_http_create(&ho, &h);
    if (rc == 0) rc = ffio_remote_open(h, c->url, NULL, &rm, err, sizeof err);
    const size_t ext = (size_t)c->max_extent, raw = (size_t)c->max_raw;
    uint8_t *mem = rc == 0 ? malloc(c->batch * (ext + raw)) : NULL;
    struct ffio_record_req *q = rc == 0 ? calloc(c->batch, sizeof *q) : NULL;
    if (rc < 0 || !mem || !q) {
        snprintf(w->a.first_error, sizeof w->a.first_error, "%s",
                 err[0]   ? err
                 : rc < 0 ? ffio_strerror(rc)
                          : "out of memory");
        w->a.fatal = 1;
    }
    const struct ffr_reader *r = rm ? ffio_remote_reader(rm) : NULL;
    const uint64_t n = r ? ffr_reader_count(r) : 0;
    const double end = now_s() + c->seconds;
    while (!w->a.fatal && now_s() < end) {
        uint64_t first = 0;
        if (!c->random) first = atomic_fetch_add(&c->seq_next, c->batch) % n;
        for (uint64_t k = 0; k < c->batch; k++)
            q[k] = (struct ffio_record_req){
                .index = c->random ? xorshift(&w->seed) % n : (first + k) % n,
                .extent = mem + k * ext,
                .extent_cap = ext,
                .dst = c->decompress ? mem + c->batch * ext + k * raw : NULL,
                .dst_cap = raw,
            };
        const double t0 = now_s();
        rc = ffio_remote_read(rm, q, c->batch);
        if (rc < 0) {
            snprintf(w->a.first_error, sizeof w->a.first_error, "%s", ffio_http_last_error(h));
            w->a.fatal = 1;
            break;
        }
        for (uint64_t k = 0; k < c->batch; k++) {
            if (q[k].result < 0) {
                if (!w->a.errors++)
                    snprintf(w->a.first_error, sizeof w->a.first_error, "record %" PRIu64 ": %s",
                             q[k].index,
                             q[k].result <= -1000 || !ffio_http_last_error(h)[0]
                                 ? ffr_strerror((int)q[k].result)
                                 : ffio_http_last_error(h));
                w->a.fatal = 1;
                continue;
            }
            struct ffr_record_info in;
            ffr_reader_info(r, q[k].index, &in);
            w->a.bytes += in.frame_len;
            w->a.items++;
        }
        add_lat(&w->a, 1e3 * (now_s() - t0));
    }
    free(q);
    free(mem);
    ffio_remote_close(rm);
    ffio_http_destroy(h);
    return NULL;
}

/* The baseline: what a PyTorch-style loader does per image (open, read, decode, resize). */
static void *jpeg_worker(void *arg)
{
    struct worker *w = arg;
    struct pack_image_decoder *dec;
    if (pack_image_decoder_create(NULL, &dec) < 0) return NULL;
    size_t cap = 1u << 20;
    uint8_t *buf = malloc(cap);
    const double end = now_s() + w->c->seconds;
    while (buf && now_s() < end) {
        const double t0 = now_s();
        for (uint64_t k = 0; k < w->c->batch; k++) {
            const char *path = w->files[xorshift(&w->seed) % w->n_files];
            const int fd = open(path, O_RDONLY | O_CLOEXEC);
            struct stat st;
            if (fd < 0 || fstat(fd, &st) < 0) {
                if (fd >= 0) close(fd);
                w->a.errors++;
                continue;
            }
            if ((size_t)st.st_size > cap) {
                uint8_t *nb = realloc(buf, (size_t)st.st_size);
                if (!nb) {
                    close(fd);
                    break;
                }
                buf = nb;
                cap = (size_t)st.st_size;
            }
            const ssize_t got = read(fd, buf, (size_t)st.st_size);
            close(fd);
            struct pack_image im;
            if (got != st.st_size || pack_image_load(dec, w->size, PACK_IMAGE_INTERP_AUTO_TRAIN,
                                                     buf, (size_t)got, &im) < 0) {
                w->a.errors++;
                continue;
            }
            w->a.items++;
            w->a.bytes += (uint64_t)got;
        }
        add_lat(&w->a, 1e3 * (now_s() - t0));
    }
    free(buf);
    pack_image_decoder_destroy(dec);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs `threads` workers of one kind and merges their counters into *out. */
static int run_arm(struct cfg *c, void *(*fn)(void *), char **files, size_t n_files, int size,
                   struct arm *out, double *secs)
{
    struct worker *ws = calloc(c->threads, sizeof *ws);
    pthread_t *th = calloc(c->threads, sizeof *th);
    if (!ws || !th) {
        free(ws);
        free(th);
        return -ENOMEM;
    }
    const double t0 = now_s();
    uint64_t started = 0;
    for (uint64_t k = 0; k < c->threads; k++) {
        ws[k] = (struct worker){ .c = c,
                                 .seed = 0x9e3779b97f4a7c15ull * (k + 1),
                                 .files = files,
                                 .n_files = n_files,
                                 .size = size };
        if (pthread_create(&th[k], NULL, fn, &ws[k]) != 0) break;
        started++;
    }
    memset(out, 0, sizeof *out);
    for (uint64_t k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        out->items += ws[k].a.items;
        out->bytes += ws[k].a.bytes;
        out->errors += ws[k].a.errors;
        out->fatal |= ws[k].a.fatal;
        if (!out->first_error[0] && ws[k].a.first_error[0])
            memcpy(out->first_error, ws[k].a.first_error, sizeof out->first_error);
        for (size_t i = 0; i < ws[k].a.n_lat; i++)
            add_lat(out, ws[k].a.lat[i]);
        free(ws[k].a.lat);
    }
    *secs = now_s() - t0;
    free(ws);
    free(th);
    qsort(out->lat, out->n_lat, sizeof *out->lat, cmp_double);
    return started == c->threads ? 0 : -EAGAIN;
}

static double pct(const struct arm *a, double p)
{
    if (!a->n_lat) return 0;
    size_t i = (size_t)ceil(p * (double)a->n_lat) - 1;
    if (i >= a->n_lat) i = a->n_lat - 1;
    return a->lat[i];
}

struct names {
    char **v;
    size_t n, cap;
};

static int has_jpeg_ext(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static void list_jpegs(const char *dir, struct names *out, int depth)
{
    DIR *d = opendir(dir);
    if (!d || depth > 8) {
        if (d) closedir(d);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) < 0) continue;
        if (S_ISDIR(st.st_mode)) {
            list_jpegs(p, out, depth + 1);
        } else if (S_ISREG(st.st_mode) && has_jpeg_ext(e->d_name)) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 256;
                char **nv = realloc(out->v, out->cap * sizeof *nv);
                if (!nv) break;
                out->v = nv;
            }
            out->v[out->n++] = strdup(p);
        }
    }
    closedir(d);
}

/* Asks the kernel to forget cached pages of fd (works for clean pages without privileges). */
static int drop_cache_fd(int fd)
{
    return posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 ? 0 : -1;
}

/* Largest extent and decoded size over the dataset: the per-record buffer sizes. */
static void size_buffers(struct cfg *c)
{
    const uint64_t n = ffr_reader_count(c->r);
    for (uint64_t i = 0; i < n; i++) {
        struct ffr_record_info in;
        ffr_reader_info(c->r, i, &in);
        if (in.extent_len > c->max_extent) c->max_extent = in.extent_len;
        if (in.raw_len > c->max_raw) c->max_raw = in.raw_len;
    }
}

static void print_arm(const char *label, const struct arm *a, double secs)
{
    printf("  %-7s %.1f MB/s (MB = 10^6 B), %.1f records/s, batch latency p50 %.2f ms, p99 %.2f "
           "ms, %" PRIu64 " errors\n",
           label, (double)a->bytes / 1e6 / secs, (double)a->items / secs, pct(a, 0.5), pct(a, 0.99),
           a->errors);
}

static void json_arm(cJSON *j, const char *label, const struct arm *a, double secs)
{
    cJSON *o = cJSON_AddObjectToObject(j, label);
    cJSON_AddNumberToObject(o, "seconds", secs);
    cJSON_AddNumberToObject(o, "records", (double)a->items);
    cJSON_AddNumberToObject(o, "bytes", (double)a->bytes);
    cJSON_AddNumberToObject(o, "mb_per_s", (double)a->bytes / 1e6 / secs);
    cJSON_AddNumberToObject(o, "records_per_s", (double)a->items / secs);
    cJSON_AddNumberToObject(o, "p50_ms", pct(a, 0.5));
    cJSON_AddNumberToObject(o, "p99_ms", pct(a, 0.99));
    cJSON_AddNumberToObject(o, "errors", (double)a->errors);
}

/*
 * Remote and cached reads, side by side in one run: the source (a URL read with HTTP range
 * requests, or a local path through the engine), then with --cache-dir the node cache filled
 * from it (timed: the cold copy) and read through the engine, and the ratio of the two rates.
 */
static int bench_shared(struct cfg *c, const char *src, const char *cache_dir, int json,
                        const char *mode)
{
    const struct ffrt_cmd *cmd = c->cmd;
    const int is_url = ffio_http_is_url(src);
    struct ffio_http *h = NULL;
    struct ffio_remote *rm = NULL;
    struct ffr_reader *lr = NULL, *cr = NULL;
    struct ffr_cache *cache = NULL;
    struct arm src_arm = { 0 }, cache_arm = { 0 };
    double src_secs = 0, cache_secs = 0, fill_secs = 0;
    uint64_t fill_bytes = 0;
    int fetched = 0;
    char err[1024] = "", cached[4096] = "";
    cJSON *j = json ? cJSON_CreateObject() : NULL;
    int rc = FFRT_EXIT_OK;
    struct ffio_http_opts ho;
    ffio_http_opts_default(&ho);
    if (is_url || cache_dir) {
        const int e = ffio_http_create(&ho, &h);
        if (e < 0 && is_url) {
            rc = ffrt_fail(cmd, "%s: %s", src,
                           e == -ENOTSUP ? "this build has no libcurl (libcurl4-openssl-dev)"
                                         : ffio_strerror(e));
            goto out;
        }
    }
    if (is_url) {
        if (ffio_remote_open(h, src, NULL, &rm, err, sizeof err) < 0) {
            rc = ffrt_fail(cmd, "%s", err);
            goto out;
        }
        c->r = ffio_remote_reader(rm);
        c->url = src;
    } else {
        if (ffr_reader_open(&lr, src, NULL, err, sizeof err) < 0) {
            rc = ffrt_fail(cmd, "%s", err);
            goto out;
        }
        c->r = lr;
    }
    if (!ffr_reader_count(c->r)) {
        rc = ffrt_fail(cmd, "%s: no records to read", src);
        goto out;
    }
    size_buffers(c);
    if (run_arm(c, is_url ? remote_worker : ffr_worker, NULL, 0, 0, &src_arm, &src_secs) < 0 ||
        src_arm.fatal) {
        rc = ffrt_fail(cmd, "%s: %s", src, src_arm.first_error[0] ? src_arm.first_error : "failed");
        goto out;
    }
    if (cache_dir) {
        struct ffr_cache_source source;
        ffio_http_cache_source(h, &source);
        struct ffr_cache_opts co;
        ffr_cache_opts_default(&co);
        co.source = h ? &source : NULL;
        if (ffr_cache_open(&cache, cache_dir, &co, err, sizeof err) < 0) {
            rc = ffrt_fail(cmd, "%s", err);
            goto out;
        }
        const double t0 = now_s();
        fetched = ffr_cache_dataset(cache, src, cached, sizeof cached, err, sizeof err);
        fill_secs = now_s() - t0;
        if (fetched < 0) {
            rc = ffrt_fail(cmd, "%s", err);
            goto out;
        }
        struct ffr_cache_stats cs;
        ffr_cache_stats(cache, &cs);
        fill_bytes = cs.fetched_bytes;
        if (ffr_reader_open(&cr, cached, NULL, err, sizeof err) < 0) {
            rc = ffrt_fail(cmd, "%s", err);
            goto out;
        }
        c->r = cr;
        c->url = NULL;
        atomic_store(&c->seq_next, 0);
        if (run_arm(c, ffr_worker, NULL, 0, 0, &cache_arm, &cache_secs) < 0 || cache_arm.fatal) {
            rc = ffrt_fail(cmd, "%s: %s", cached,
                           cache_arm.first_error[0] ? cache_arm.first_error : "failed");
            goto out;
        }
    }
    const char *src_label = is_url ? "remote" : "local";
    const double src_rps = (double)src_arm.items / src_secs;
    if (!json) {
        printf("ffr bench %s: %s, batch %" PRIu64 ", qd %" PRIu64 ", %" PRIu64 " thread%s, %.1f s "
               "per arm%s\n",
               src, mode, c->batch, c->qd, c->threads, c->threads == 1 ? "" : "s", c->seconds,
               c->decompress ? ", decompress" : "");
        print_arm(src_label, &src_arm, src_secs);
        if (cache_dir) {
            printf("  fill    %s: %d shard%s fetched, %.1f MB in %.2f s (%.1f MB/s), %s\n", cached,
                   fetched, fetched == 1 ? "" : "s", (double)fill_bytes / 1e6, fill_secs,
                   fill_secs > 0 ? (double)fill_bytes / 1e6 / fill_secs : 0.0,
                   fetched ? "every fetched byte verified"
                           : "all reused (size, trailer and index checked; records are checked "
                             "as they are read)");
            print_arm("cached", &cache_arm, cache_secs);
            printf("ratio: cached %.1f records/s / %s %.1f records/s = %.2fx\n",
                   (double)cache_arm.items / cache_secs, src_label, src_rps,
                   (double)cache_arm.items / cache_secs / src_rps);
        }
    } else {
        cJSON_AddStringToObject(j, "file", src);
        cJSON_AddStringToObject(j, "mode", mode);
        cJSON_AddNumberToObject(j, "batch", (double)c->batch);
        cJSON_AddNumberToObject(j, "threads", (double)c->threads);
        cJSON_AddNumberToObject(j, "records_per_s", src_rps);
        cJSON_AddNumberToObject(j, "mb_per_s", (double)src_arm.bytes / 1e6 / src_secs);
        json_arm(j, src_label, &src_arm, src_secs);
        if (cache_dir) {
            json_arm(j, "cached", &cache_arm, cache_secs);
            cJSON_AddNumberToObject(j, "cache_fetched_shards", fetched);
            cJSON_AddNumberToObject(j, "cache_fill_seconds", fill_secs);
            cJSON_AddNumberToObject(j, "cache_fill_bytes", (double)fill_bytes);
            cJSON_AddNumberToObject(j, "ratio", (double)cache_arm.items / cache_secs / src_rps);
        }
        char *text = cJSON_PrintUnformatted(j);
        if (text) puts(text);
        free(text);
    }
    if (src_arm.errors || cache_arm.errors) rc = FFRT_EXIT_FAIL;
out:
    cJSON_Delete(j);
    free(src_arm.lat);
    free(cache_arm.lat);
    ffr_reader_close(cr);
    ffr_cache_close(cache);
    ffr_reader_close(lr);
    ffio_remote_close(rm);
    ffio_http_destroy(h);
    return rc;
}

int ffrt_cmd_bench(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    const char *mode = "random", *batch = "64", *qd = "32", *io = "auto", *seconds = "5";
    const char *threads = "1", *jpeg_dir = NULL, *size_s = "640", *cache_dir = NULL;
    int direct = 0, buffered = 0, verify = 0, decompress = 0, pixels = 0, json = 0, drop = 0;
    int sqpoll = 0;
    const struct ffrt_opt opts[] = {
        { "mode", 0, NULL, &mode },
        { "batch", 0, NULL, &batch },
        { "qd", 0, NULL, &qd },
        { "io", 0, NULL, &io },
        { "seconds", 0, NULL, &seconds },
        { "threads", 'j', NULL, &threads },
        { "jpeg-baseline", 0, NULL, &jpeg_dir },
        { "cache-dir", 0, NULL, &cache_dir },
        { "size", 0, NULL, &size_s },
        { "direct", 0, &direct, NULL },
        { "buffered", 0, &buffered, NULL },
        { "verify", 0, &verify, NULL },
        { "decompress", 0, &decompress, NULL },
        { "pixels", 0, &pixels, NULL },
        { "json", 0, &json, NULL },
        { "drop-cache", 0, &drop, NULL },
        { "sqpoll", 0, &sqpoll, NULL },
        { NULL, 0, NULL, NULL },
    };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 0, 1, &a);
    if (rc != FFRT_PROCEED) return rc;
    if (a.n_pos == 0 && !jpeg_dir)
        return ffrt_usage_error(cmd, "give a record FILE, --jpeg-baseline DIR, or both");
    struct cfg c;
    memset(&c, 0, sizeof c);
    c.cmd = cmd;
    uint64_t size = 640;
    if ((rc = ffrt_parse_count(cmd, "--batch", batch, &c.batch)) != FFRT_PROCEED ||
        (rc = ffrt_parse_count(cmd, "--qd", qd, &c.qd)) != FFRT_PROCEED ||
        (rc = ffrt_parse_count(cmd, "--threads", threads, &c.threads)) != FFRT_PROCEED ||
        (rc = ffrt_parse_count(cmd, "--size", size_s, &size)) != FFRT_PROCEED)
        return rc;
    if (!c.batch || c.batch > 65536) return ffrt_usage_error(cmd, "--batch must be 1..65536");
    if (!c.qd || c.qd > 4096) return ffrt_usage_error(cmd, "--qd must be 1..4096");
    if (!c.threads || c.threads > 1024) return ffrt_usage_error(cmd, "--threads must be 1..1024");
    if (!size || size > 16384) return ffrt_usage_error(cmd, "--size must be 1..16384");
    char *end;
    c.seconds = strtod(seconds, &end);
    if (*end || !(c.seconds > 0) || c.seconds > 86400)
        return ffrt_usage_error(cmd, "bad --seconds '%s'", seconds);
    if (strcmp(mode, "random") && strcmp(mode, "seq"))
        return ffrt_usage_error(cmd, "--mode must be random or seq");
    c.random = !strcmp(mode, "random");
    if (ffio_engine_kind_parse(io, &c.engine) < 0)
        return ffrt_usage_error(cmd, "--io must be auto, uring, pread or mmap");
    if (direct && buffered)
        return ffrt_usage_error(cmd, "--direct and --buffered exclude each other");
    c.direct = direct ? FFIO_DIRECT_ON : buffered ? FFIO_DIRECT_OFF : FFIO_DIRECT_AUTO;
    c.verify = verify;
    c.sqpoll = sqpoll;
    c.pixels = pixels;
    c.decompress = decompress || pixels;
    if (a.n_pos == 1 && (ffio_http_is_url(a.pos[0]) || cache_dir)) {
        if (pixels || jpeg_dir)
            return ffrt_usage_error(cmd, "--pixels and --jpeg-baseline are for local files "
                                         "without --cache-dir");
        return bench_shared(&c, a.pos[0], cache_dir, json, mode);
    }
    if (cache_dir) return ffrt_usage_error(cmd, "--cache-dir needs a FILE or URL");

    struct ffrt_ds ds = { 0 };
    struct arm fa = { 0 }, ja = { 0 };
    double fsecs = 0, jsecs = 0;
    struct names files = { 0 };
    cJSON *j = json ? cJSON_CreateObject() : NULL;
    rc = FFRT_EXIT_OK;
    if (a.n_pos == 1) {
        if ((rc = ffrt_ds_open(cmd, &ds, a.pos[0])) != FFRT_EXIT_OK) goto out;
        c.r = ds.r;
        if (!ds.count) {
            rc = ffrt_fail(cmd, "%s: no records to read", a.pos[0]);
            goto out;
        }
        if (pixels && !ds.is_det) {
            rc = ffrt_fail(cmd, "%s: --pixels needs a detection dataset (ffr-det-1)", a.pos[0]);
            goto out;
        }
        for (uint64_t i = 0; i < ds.count; i++) {
            struct ffr_record_info in;
            ffr_reader_info(ds.r, i, &in);
            if (in.extent_len > c.max_extent) c.max_extent = in.extent_len;
            if (in.raw_len > c.max_raw) c.max_raw = in.raw_len;
            struct det_summary s;
            if (pixels && det_summary_decode(in.summary, in.summary_len, &s) == 0 &&
                (uint64_t)s.h * s.w * 3 > c.max_pixels)
                c.max_pixels = (uint64_t)s.h * s.w * 3;
        }
        if (drop) {
            int dropped = 1;
            for (uint32_t k = 0; k < ds.n_shards; k++) {
                struct ffr_shard_info si;
                ffr_reader_shard(ds.r, k, &si);
                if (drop_cache_fd(si.fd) < 0) dropped = 0;
            }
            if (!dropped)
                fprintf(stderr, "ffr bench: could not drop the page cache; reads may be warm\n");
        }
        if (run_arm(&c, ffr_worker, NULL, 0, 0, &fa, &fsecs) < 0 || fa.fatal) {
            rc = ffrt_fail(cmd, "%s: %s", a.pos[0], fa.first_error[0] ? fa.first_error : "failed");
            goto out;
        }
        struct ffio_records_opts ro;
        ffio_records_opts_default(&ro);
        ro.io.engine = c.engine;
        ro.io.direct = c.direct;
        struct ffio_engine_info ei = { 0 };
        struct ffio_records *probe;
        if (ffio_records_open(ds.r, &ro, &probe) == 0) {
            ffio_engine_info(ffio_records_engine(probe), &ei);
            struct ffio_file_info fi;
            if (ffio_engine_file_info(ffio_records_engine(probe), 0, &fi) == 0 && !fi.direct)
                c.direct = FFIO_DIRECT_OFF;
            ffio_records_close(probe);
        }
        const double mbps = (double)fa.bytes / 1e6 / fsecs, rps = (double)fa.items / fsecs;
        const char *eng = ffio_engine_kind_name(ei.kind);
        const int is_direct = c.direct != FFIO_DIRECT_OFF && ei.kind != FFIO_ENGINE_MMAP;
        if (!json) {
            printf("ffr bench %s: %s, batch %" PRIu64 ", qd %" PRIu64 ", %s%s, %" PRIu64
                   " thread%s, %.1f s%s%s%s\n",
                   a.pos[0], mode, c.batch, c.qd, eng, is_direct ? " O_DIRECT" : " buffered",
                   c.threads, c.threads == 1 ? "" : "s", fsecs, verify ? ", verify" : "",
                   c.decompress ? ", decompress" : "", pixels ? ", to pixels" : "");
            printf("  %.1f MB/s (MB = 10^6 B), %.1f records/s, batch latency p50 %.2f ms, p99 "
                   "%.2f ms, %" PRIu64 " errors\n",
                   mbps, rps, pct(&fa, 0.5), pct(&fa, 0.99), fa.errors);
            if (fa.errors) printf("  first error: %s\n", fa.first_error);
        } else {
            cJSON_AddStringToObject(j, "file", a.pos[0]);
            cJSON_AddStringToObject(j, "mode", mode);
            cJSON_AddNumberToObject(j, "batch", (double)c.batch);
            cJSON_AddNumberToObject(j, "qd", (double)c.qd);
            cJSON_AddStringToObject(j, "io", eng);
            cJSON_AddBoolToObject(j, "direct", is_direct);
            cJSON_AddBoolToObject(j, "verify", verify);
            cJSON_AddBoolToObject(j, "decompress", c.decompress);
            cJSON_AddBoolToObject(j, "pixels", pixels);
            cJSON_AddNumberToObject(j, "threads", (double)c.threads);
            cJSON_AddNumberToObject(j, "seconds", fsecs);
            cJSON_AddNumberToObject(j, "records", (double)fa.items);
            cJSON_AddNumberToObject(j, "bytes", (double)fa.bytes);
            cJSON_AddNumberToObject(j, "mb_per_s", mbps);
            cJSON_AddNumberToObject(j, "records_per_s", rps);
            cJSON_AddNumberToObject(j, "p50_ms", pct(&fa, 0.5));
            cJSON_AddNumberToObject(j, "p99_ms", pct(&fa, 0.99));
            cJSON_AddNumberToObject(j, "errors", (double)fa.errors);
        }
        if (fa.errors) rc = FFRT_EXIT_FAIL;
    }
    if (jpeg_dir) {
        list_jpegs(jpeg_dir, &files, 0);
        if (!files.n) {
            rc = ffrt_fail(cmd, "%s: no .jpg files found", jpeg_dir);
            goto out;
        }
        if (drop)
            for (size_t i = 0; i < files.n; i++) {
                const int fd = open(files.v[i], O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                    drop_cache_fd(fd);
                    close(fd);
                }
            }
        run_arm(&c, jpeg_worker, files.v, files.n, (int)size, &ja, &jsecs);
        const double ips = (double)ja.items / jsecs;
        if (!json) {
            printf("jpeg baseline %s: %zu files, open + read + decode + resize to %" PRIu64
                   " (as a loader does), %" PRIu64 " thread%s, %.1f s\n",
                   jpeg_dir, files.n, size, c.threads, c.threads == 1 ? "" : "s", jsecs);
            printf("  %.1f images/s, %.1f MB/s of JPEG, %" PRIu64 " errors\n", ips,
                   (double)ja.bytes / 1e6 / jsecs, ja.errors);
            if (a.n_pos == 1)
                printf("ratio: ffr %.1f records/s / loose JPEG %.1f images/s = %.2fx\n",
                       (double)fa.items / fsecs, ips, (double)fa.items / fsecs / ips);
        } else {
            cJSON *b = cJSON_AddObjectToObject(j, "jpeg_baseline");
            cJSON_AddStringToObject(b, "dir", jpeg_dir);
            cJSON_AddNumberToObject(b, "files", (double)files.n);
            cJSON_AddNumberToObject(b, "images", (double)ja.items);
            cJSON_AddNumberToObject(b, "images_per_s", ips);
            cJSON_AddNumberToObject(b, "errors", (double)ja.errors);
            if (a.n_pos == 1) cJSON_AddNumberToObject(j, "ratio", (double)fa.items / fsecs / ips);
        }
    }
    if (json) {
        char *text = cJSON_PrintUnformatted(j);
        if (text) puts(text);
        free(text);
    }
out:
    cJSON_Delete(j);
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    free(fa.lat);
    free(ja.lat);
    ffrt_ds_close(&ds);
    return rc;
}
