/*
 * The yolo-train launcher (launch.h): the program's work after its command line is parsed. Every
 * line it says goes through the caller's say hook, every --data pack through its pack hook.
 */
#include "launch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp.h"
#include "bench_data.h"
#include "bench_step.h"
#include "ckpt.h"
#include "cli.h"
#include "dist.h"
#include "errors.h"
#include "evolve.h"
#include "ffio.h"
#include "ffr.h"
#include "hyp.h"
#include "kern_cuda.h"
#include "loader.h"
#include "model.h"
#include "node_cache.h"
#include "net.h"
#include "peers.h"
#include "plots.h"
#include "rundir.h"
#include "train.h"
#include "weights.h"
#include "util.h"

void trn_launch_opts_default(struct trn_launch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->project = "runs/train";
    o->name = "exp";
    o->optimizer = "SGD";
    o->img = 640;
    o->batch = 16;
    o->bench_steps = 10;
    o->bench_warmup = 3;
    o->epochs = 100;
    o->patience = 100;
    o->save_period = -1;
    o->seconds = 10;
    o->nproc = 1;
    o->dist_timeout = 1800;
    o->dist_backend = "auto";
    o->bucket_cap_mb = 25;
    o->amp_inf_at = -1;
    o->models_dir = "models";
    o->cache_share = "node";
}

/* One line (or a message with a hint line) to the caller's say hook. */
__attribute__((format(printf, 3, 4))) static void
say(const struct trn_launch_opts *A, enum trn_launch_say kind, const char *fmt, ...)
{
    if (!A->say) return;
    va_list ap;
    va_start(ap, fmt);
    char small[1024], *text = small;
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small && (text = malloc((size_t)n + 1))) {
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    A->say(A->say_ctx, kind, text ? text : small);
    if (text != small) free(text);
}

/* A command-line error found after parsing: exit status 2. */
__attribute__((format(printf, 2, 3))) static int usage(const struct trn_launch_opts *A,
                                                       const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    say(A, TRN_LAUNCH_USAGE, "%s", text);
    return 2;
}

/* --cpu-engine as net.h's enum. */
static int cpu_engine(const struct trn_launch_opts *A)
{
    const char *e = A->cpu_engine;
    return e && !strcmp(e, "reference") ? TRN_CPU_ENGINE_REF
           : e && !strcmp(e, "onednn")  ? TRN_CPU_ENGINE_ONEDNN
                                        : TRN_CPU_ENGINE_AUTO;
}

/* --activations as net.h's enum trn_act_store. */
static int act_store(const struct trn_launch_opts *A)
{
    const char *e = A->activations;
    return e && !strcmp(e, "bf16-nhwc")   ? TRN_ACT_BF16_NHWC
           : e && !strcmp(e, "bf16-nchw") ? TRN_ACT_BF16_NCHW
                                          : TRN_ACT_F32;
}

/* A library's message line (the loader's, the hyp file's): to stderr, after the program's name. */
static void log_cb(void *ctx, const char *msg)
{
    say(ctx, TRN_LAUNCH_ERR, "%s", msg);
}

/* The CUDA device this process uses for --device D: -1 for the CPU. D is "cpu", a list "0,1"
 * (local rank k takes the k-th, wrapping), or empty/absent: device 0 when one is visible.
 * Returns -2 (after saying why) when a device is asked for and none is usable. */
static int pick_gpu(const struct trn_launch_opts *A, int local_rank)
{
    const char *const d = A->device;
    const int count = kern_cuda_device_count();
    if (!d || !d[0]) return count > 0 ? local_rank % count : -1;
    if (!strcmp(d, "cpu")) return -1;
    int ids[64], n = 0;
    for (const char *p = d; *p && n < 64;) {
        ids[n++] = (int)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    const int id = n ? ids[local_rank % n] : 0;
    if (id >= count) {
        say(A, TRN_LAUNCH_ERR,
            "--device %s: CUDA device %d is not there (%d visible%s)\nhint: --device cpu runs the "
            "CPU reference path",
            d, id, count, count ? "" : "; or this build has no CUDA");
        return -2;
    }
    return id;
}

/* --amp as a kern dtype; without it fp32 on the CPU, bf16 on a GPU (gpu >= 0). */
static int amp_dtype(const struct trn_launch_opts *A, int gpu)
{
    enum trn_amp_dtype t = gpu >= 0 ? TRN_AMP_BF16 : TRN_AMP_OFF;
    if (A->amp) trn_amp_dtype_parse(A->amp, &t);
    return t == TRN_AMP_BF16 ? KERN_DT_BF16 : t == TRN_AMP_FP16 ? KERN_DT_F16 : KERN_DT_F32;
}

static int do_bench_step(const struct trn_launch_opts *A)
{
    char path[4096];
    if (trn_model_cfg_find(A->cfg, A->models_dir, path, sizeof path)) {
        say(A, TRN_LAUNCH_ERR, "%s: model yaml not found", A->cfg);
        return 1;
    }
    const int gpu = pick_gpu(A, 0);
    if (gpu == -2) return 1;
    struct trn_bench_step_opts o;
    trn_bench_step_opts_default(&o);
    o.cfg = path;
    o.img = (int)A->img;
    o.batch = (int)A->batch;
    o.device = gpu;
    o.device_path = gpu < 0 && A->device_path;
    o.threads = trn_cli_threads(A->threads, 1); /* as the training loop: never oversubscribed */
    o.steps = (int)A->bench_steps;
    o.warmup = (int)A->bench_warmup;
    o.seed = (uint64_t)A->seed;
    o.cuda_graph = A->cuda_graph;
    o.any_algo = A->any_algo;
    o.cudnn_plan = A->cudnn_plan;
    o.cudnn_tune = A->cudnn_tune;
    o.amp = amp_dtype(A, gpu);
    o.cpu_engine = cpu_engine(A);
    o.act_store = act_store(A);
    struct trn_bench_step_result r;
    char err[512] = "";
    const int rc = trn_bench_step_run(&o, &r, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "--bench: %s", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const char *slash = strrchr(path, '/');
    if (A->json)
        say(A, TRN_LAUNCH_OUT,
            "{\"impl\": \"ffyolo\", \"model\": \"%s\", \"device\": \"%s\", \"img\": %d, \"batch\": "
            "%d, \"img_per_s\": %.3f, \"ms_step\": %.4f, \"ms_forward\": %.4f, \"ms_loss\": %.4f, "
            "\"ms_backward\": %.4f, \"ms_optimizer\": %.4f, \"ms_ema\": %.4f, \"gflops_img\": "
            "%.4f, \"tflops\": %.4f, \"net_bytes\": %zu, \"peak_bytes\": %zu, \"resident\": %s, "
            "\"graph\": %s, \"params\": %lld, \"loss\": %.9g, \"steps\": %d, \"threads\": %d, "
            "\"blas_threads\": %d, \"os_threads\": %d, \"engine\": \"%s\", \"input\": \"%s\", "
            "\"plan_hash\": \"%016llx\", \"plans_table\": %d, \"plans_heur\": %d, "
            "\"plans_find\": %d}",
            slash ? slash + 1 : path, r.on_device ? "cuda" : "cpu", o.img, o.batch, r.img_per_s,
            r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema,
            r.gflops_img, r.tflops, r.net_bytes, r.peak_bytes, r.resident ? "true" : "false",
            r.graph ? "true" : "false", r.params, r.loss, o.steps, r.threads, r.blas_threads,
            r.os_threads, r.engine, r.input, (unsigned long long)r.plan_hash,
            r.plan_counts[KERN_PLAN_HOW_TABLE], r.plan_counts[KERN_PLAN_HOW_HEUR],
            r.plan_counts[KERN_PLAN_HOW_FIND]);
    else
        say(A, TRN_LAUNCH_OUT,
            "%s img %d batch %d on %s: %.1f img/s, %.2f ms/step (forward %.2f, loss %.2f, backward "
            "%.2f, optimizer %.2f, EMA %.2f), %.3f TFLOP/s, net %.0f MiB, peak %.0f MiB%s%s; %s",
            slash ? slash + 1 : path, o.img, o.batch, r.on_device ? "cuda" : "cpu", r.img_per_s,
            r.ms_step, r.ms_forward, r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema, r.tflops,
            (double)r.net_bytes / (1 << 20), (double)r.peak_bytes / (1 << 20),
            r.resident ? " (resident step)" : "",
            r.graph ? " (graph replays: phases not split)" : "", r.engine);
    return 0;
}

static int do_summary(const struct trn_launch_opts *A)
{
    char path[4096];
    if (trn_model_cfg_find(A->cfg, A->models_dir, path, sizeof path)) {
        say(A, TRN_LAUNCH_ERR,
            "%s: model yaml not found\nhint: give a path, or a name from models (yolov5n/s/m/l/x), "
            "or set FFYOLO_MODELS_DIR",
            A->cfg);
        return 1;
    }
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = (int)A->nc;
    struct trn_model *m = NULL;
    char err[512] = "";
    const int rc = trn_model_load(path, &o, &m, err, sizeof err);
    if (rc) {
        say(A, TRN_LAUNCH_ERR, "%s", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const int need = trn_model_summary(m, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!text) {
        say(A, TRN_LAUNCH_ERR, "out of memory");
        trn_model_destroy(m);
        return 1;
    }
    trn_model_summary(m, text, (size_t)need + 1);
    if (trn_model_info(m)->anchors_reversed)
        say(A, TRN_LAUNCH_OUT, "AutoAnchor: Reversing anchor order");
    const size_t tl = strlen(text);
    if (tl && text[tl - 1] == '\n') text[tl - 1] = '\0';
    say(A, TRN_LAUNCH_OUT, "%s", text);
    free(text);
    trn_model_destroy(m);
    return 0;
}

static int do_bench(const struct trn_launch_opts *A, const struct trn_hyp *hyp)
{
    struct trn_bench_data_opts o;
    trn_bench_data_opts_default(&o);
    o.records = A->records;
    o.workers = (unsigned)A->workers;
    o.seconds = A->seconds;
    o.batch_size = (int)A->batch;
    o.img_size = (int)A->img;
    o.seed = (uint64_t)A->seed;
    o.page_cache = A->page_cache;
    o.direct = A->direct;
    o.read_ahead = !A->no_read_ahead;
    o.cache_ram = A->cache && strcmp(A->cache, "disk") != 0;
    o.hyp = *hyp;
    o.log = log_cb;
    o.log_ctx = (void *)A;
    struct trn_bench_data_result r;
    char err[768];
    const int rc = trn_bench_data_run(&o, &r, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "%s", err); /* a repack hint is in it when size is the cause */
        return 1;
    }
    if (A->json)
        say(A, TRN_LAUNCH_OUT,
            "{\"images_per_s\": %.2f, \"workers\": %u, \"batch_size\": %ld, \"img\": %ld, "
            "\"seconds\": %.3f, \"images\": %llu, \"bad_records\": %llu, \"mosaic\": %g, "
            "\"mixup\": %g, \"cache\": \"%s\"}",
            r.images_per_s, r.workers, A->batch, A->img, r.seconds, (unsigned long long)r.images,
            (unsigned long long)r.bad_records, hyp->mosaic, hyp->mixup,
            o.cache_ram ? "ram" : "none");
    else
        say(A, TRN_LAUNCH_OUT,
            "%.1f images/s (%u workers, batch %ld, img %ld, %llu images in %.1f s, mosaic %g, "
            "mixup %g)",
            r.images_per_s, r.workers, A->batch, A->img, (unsigned long long)r.images, r.seconds,
            hyp->mosaic, hyp->mixup);
    return 0;
}

static int do_plot(const struct trn_launch_opts *A, const struct trn_hyp *hyp)
{
    char dir[PATH_MAX - 32];
    int rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "cannot create the run directory %s/%s...: %s", A->project, A->name,
            strerror(-rc));
        return 1;
    }
    struct ffr_reader *r = NULL;
    char err[768];
    rc = ffr_reader_open(&r, A->records, NULL, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "%s", err[0] ? err : ffr_strerror(rc));
        return 1;
    }
    size_t mlen = 0;
    const char *meta = ffr_reader_metadata(r, &mlen);
    struct trn_plot_names names;
    if (trn_plot_names_parse(meta, mlen, &names) < 0) {
        say(A, TRN_LAUNCH_ERR, "out of memory");
        ffr_reader_close(r);
        return 1;
    }
    struct trn_loader_opts lo;
    trn_loader_opts_default(&lo);
    lo.workers = (unsigned)A->workers;
    lo.batch_size = (int)A->batch;
    lo.img_size = (int)A->img;
    lo.seed = (uint64_t)A->seed;
    lo.hyp = *hyp;
    lo.log = log_cb;
    lo.log_ctx = (void *)A;
    struct trn_loader *l = NULL;
    rc = trn_loader_create(r, &lo, &l, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "%s: %s", A->records, err);
    }
    for (int k = 0; k < 3 && rc == 0; k++) {
        struct trn_batch b;
        rc = trn_loader_next(l, &b);
        if (rc < 0) {
            say(A, TRN_LAUNCH_ERR, "%s", trn_loader_error(l));
            break;
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/train_batch%d.jpg", dir, k);
        rc = trn_plot_batch(&b, &names, path, err, sizeof err);
        if (rc < 0)
            say(A, TRN_LAUNCH_ERR, "%s", err);
        else
            say(A, TRN_LAUNCH_OUT, "%s", path);
        if (b.step + 1 == b.steps) break; /* a one-batch epoch: ultralytics plots what exists */
    }
    trn_loader_destroy(l);
    trn_plot_names_free(&names);
    ffr_reader_close(r);
    return rc < 0 ? 1 : 0;
}

/* The run's log lines: to stdout. */
static void print_line(void *ctx, const char *line)
{
    say(ctx, TRN_LAUNCH_OUT, "%s", line);
}

/* --resume: "" = the newest PROJECT/NAME/weights/last.ckpt; a .ckpt file; or a run directory. */
static int find_resume(const struct trn_launch_opts *A, char *ckpt, size_t cap, char *dir,
                       size_t dcap)
{
    struct stat st;
    if (A->resume[0]) {
        if (stat(A->resume, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (snprintf(ckpt, cap, "%s/weights/last.ckpt", A->resume) >= (int)cap)
                return -ENAMETOOLONG;
        } else if (snprintf(ckpt, cap, "%s", A->resume) >= (int)cap) {
            return -ENAMETOOLONG;
        }
    } else {
        DIR *d = opendir(A->project);
        if (!d) return -errno;
        double newest = -1;
        const struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s/weights/last.ckpt", A->project, e->d_name) >=
                (int)sizeof p)
                continue;
            if (stat(p, &st) != 0) continue;
            const double t = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
            if (t > newest && strlen(p) < cap) {
                newest = t;
                snprintf(ckpt, cap, "%s", p);
            }
        }
        closedir(d);
        if (newest < 0) return -ENOENT;
    }
    if (stat(ckpt, &st) != 0) return -errno;
    /* the run directory: .../weights/last.ckpt -> ... */
    if (snprintf(dir, dcap, "%s", ckpt) >= (int)dcap) return -ENAMETOOLONG;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, dcap, ".");
    }
    return 0;
}

/* --resume: the records to read instead of the checkpoint's, into rec and val (empty: the
 * checkpoint's), and the dataset yaml they come from in *data. --data given: its packs at the
 * checkpoint's img. Else, when the checkpoint's records are gone (a newer pack of its dataset
 * replaced them once the job that held them ended) and it names its --data: packed again from
 * that (the same source gives the same records; the trainer checks their content either way).
 * Returns 0 or 1 (after saying why). */
static int resume_records(const struct trn_launch_opts *A, const char *ckpt, char *rec, char *val,
                          size_t cap, const char **data)
{
    rec[0] = val[0] = '\0';
    *data = A->data;
    if (!A->data && A->records) return 0;
    struct trn_ckpt *C = NULL;
    char err[768] = "";
    if (trn_ckpt_open(ckpt, &C, err, sizeof err) < 0) return 0; /* the trainer says why */
    int64_t img = 0;
    const char *from = trn_ckpt_get(C, "data"), *ck_rec = trn_ckpt_get(C, "records");
    static char src[PATH_MAX], was[PATH_MAX];
    /* copies: the checkpoint's strings go with it */
    snprintf(was, sizeof was, "%s", ck_rec ? ck_rec : "");
    snprintf(src, sizeof src, "%s",
             A->data                                               ? A->data
             : from && from[0] && was[0] && access(was, F_OK) != 0 ? from
                                                                   : "");
    const int ok_img = trn_ckpt_i64(C, "img", 32, 16383, &img) == 0;
    trn_ckpt_close(C);
    if (!src[0] || !ok_img) return 0;
    if (!A->data)
        say(A, TRN_LAUNCH_ERR, "--resume: %s is gone; packing it again from %s", was, src);
    *data = src;
    int rc = A->pack(A->pack_ctx, src, "train", (int)img, rec, cap);
    if (rc == 1) say(A, TRN_LAUNCH_ERR, "--data %s: no train split", src);
    if (rc) return 1;
    rc = A->pack(A->pack_ctx, src, "val", (int)img, val, cap);
    return rc < 0;
}

/* The job's peers (served by local rank 0, asked by every rank), kept for the whole run: other
 * nodes may still ask this one while it trains. */
static struct trn_peers *g_peers;
static char g_master_addr[256]; /* rank 0's host, from the launcher (join_job) */

/*
 * The waits for a cache fill: they last as long as the slowest node's fetches, which
 * --dist-timeout (a bound on collectives) does not size. Such a wait ends within the dataset's
 * bytes at FILL_FLOOR_BPS past --dist-timeout: the rate below which the HTTP reader gives up on
 * a read itself (ffio_http_opts.read_deadline_s), so a fill that keeps its own deadlines keeps
 * this one. A rank that exits or stops meanwhile is found by the communicator's heartbeat
 * within seconds (trn_dist_barrier_for).
 */
#define FILL_FLOOR_BPS 65536.0
struct fill_wait {
    struct trn_dist *dist;
    double timeout_s;
};

static struct fill_wait fill_wait(const struct trn_launch_opts *A, struct trn_dist *dist,
                                  uint64_t bytes)
{
    return (struct fill_wait){ dist, A->dist_timeout + (double)bytes / FILL_FLOOR_BPS };
}

static int barrier_cb(void *ctx)
{
    const struct fill_wait *w = ctx;
    return trn_dist_barrier_for(w->dist, w->timeout_s);
}

/* The bytes of the dataset at path: a manifest's shards, or the file's size; 0 if unreadable. */
static uint64_t dataset_bytes(const char *path)
{
    struct stat sb;
    if (!path || stat(path, &sb) != 0) return 0;
    char *text = NULL;
    size_t len = 0;
    struct ffr_cache_shard *sh = NULL;
    uint32_t n = 0;
    uint64_t b = (uint64_t)sb.st_size;
    /* a manifest is text of about 200 bytes a shard; a record file fails its parse */
    if (sb.st_size < (64 << 20) && trn_read_file(path, 64 << 20, &text, &len, NULL, 0) == 0 &&
        ffr_manifest_shards(text, len, &sh, &n, NULL, 0) == 0) {
        b = 0;
        for (uint32_t k = 0; k < n; k++)
            b += sh[k].bytes;
        ffr_manifest_shards_free(sh, n);
    }
    free(text);
    return b;
}

static void peers_log(void *ctx, enum ffio_log_level level, const char *msg)
{
    (void)level;
    say(ctx, TRN_LAUNCH_ERR, "%s", msg);
}

/*
 * The job's peers (docs/sharing.md section 7), set up once per process: local rank 0 of each
 * node serves the node's cache, and the nodes' addresses are summed over the job's
 * communicator. Every rank calls it, at the same point, and all get the same answer: 1 when
 * the nodes fill from each other, 0 when each fetches alone (a line says why), as with --peers
 * off or one node.
 */
static int peers_join(const struct trn_launch_opts *A, const char *src, struct trn_dist *dist,
                      int L)
{
    static int joined = -1; /* the job's nodes do not change: asked once */
    if (joined >= 0) return joined;
    const int rank = trn_dist_rank(dist), world = trn_dist_world(dist);
    const int nodes = (world + L - 1) / L;
    if (!A->cache_dir || (A->peers && !strcmp(A->peers, "off")) || nodes < 2) return 0;
    const uint32_t node = (uint32_t)(rank / L);
    char err[1024] = "";
    /* The server, and this node's address, summed over the job (all ranks take part, also
     * when their own part failed, so that no rank waits for another). A node's slot: the
     * family (4 or 6), the address's 16 bytes as two words (an IPv4 address in the first four
     * bytes), the port; only the node's local rank 0 writes it, so the sum is its value. */
    enum { SLOT = 4 };
    int64_t *addr = calloc((size_t)nodes * SLOT, sizeof *addr);
    char(*hosts)[INET6_ADDRSTRLEN] = calloc((size_t)nodes, sizeof *hosts);
    const char **hp = calloc((size_t)nodes, sizeof *hp);
    int *ports = calloc((size_t)nodes, sizeof *ports);
    int rc = addr && hosts && hp && ports ? 0 : -ENOMEM;
    if (rc == 0 && !g_peers)
        rc = trn_peers_create(A->cache_dir, rank % L == 0, NULL, (int)A->peer_port, peers_log,
                              (void *)A, &g_peers, err, sizeof err);
    if (rc == 0 && rank % L == 0) {
        char host[INET6_ADDRSTRLEN + 8];
        uint8_t ia[16] = { 0 };
        if (A->peer_host)
            snprintf(host, sizeof host, "%s", A->peer_host);
        else if (trn_peers_local_addr(g_master_addr[0] ? g_master_addr : "127.0.0.1", host,
                                      sizeof host) < 0)
            host[0] = '\0';
        const int fam = inet_pton(AF_INET, host, ia) == 1    ? 4
                        : inet_pton(AF_INET6, host, ia) == 1 ? 6
                                                             : 0;
        if (fam) {
            int64_t *slot = addr + SLOT * node;
            slot[0] = fam;
            memcpy(&slot[1], ia, 16);
            slot[3] = trn_peers_port(g_peers);
        } else {
            snprintf(err, sizeof err, "no IP address to announce (%s); give --peer-host",
                     host[0] ? host : "none found toward the job's MASTER_ADDR");
            rc = -EADDRNOTAVAIL;
        }
    }
    if (rc < 0)
        say(A, TRN_LAUNCH_ERR, "rank %d: peers off: %s", rank, err[0] ? err : strerror(-rc));
    int64_t one = 0;
    bool all = trn_dist_allreduce_i64(dist, addr ? addr : &one, addr ? (size_t)nodes * SLOT : 1,
                                      TRN_DIST_SUM) == 0 &&
               addr;
    for (int m = 0; m < nodes && all; m++)
        all = addr[SLOT * m + 3] > 0 && (addr[SLOT * m] == 4 || addr[SLOT * m] == 6);
    for (int m = 0; m < nodes && all; m++) {
        const int64_t *slot = addr + SLOT * m;
        uint8_t ia[16];
        memcpy(ia, &slot[1], 16);
        inet_ntop(slot[0] == 4 ? AF_INET : AF_INET6, ia, hosts[m], sizeof hosts[m]);
        hp[m] = hosts[m];
        ports[m] = (int)slot[3];
    }
    /* every rank sees the same sums; a failure to take the list is agreed on below */
    int64_t bad = all && trn_peers_set_nodes(g_peers, (uint32_t)nodes, hp, ports, node) < 0;
    if (trn_dist_allreduce_i64(dist, &bad, 1, TRN_DIST_SUM) < 0) bad = 1;
    free(addr);
    free(hosts);
    free(hp);
    free(ports);
    if (!all && rank == 0)
        say(A, TRN_LAUNCH_ERR, "peers off: a node announced no server; each node fetches from %s",
            src);
    return joined = all && !bad;
}

/*
 * --cache-dir with several nodes and a cache that holds the dataset (docs/sharing.md section
 * 7): the shards are fetched from the origin once, by the node that reads each first in epoch
 * 0, then by the others from it (a barrier between), each byte checked. Every rank calls it, at
 * the same point. *done: the shards are in the cache (else the caller fills it alone, as
 * without peers). Returns 0, or 1 after saying why.
 */
static int peer_fill(const struct trn_launch_opts *A, const char *src, struct trn_dist *dist,
                     int local_world, const struct ffr_cache_opts *co, bool *done)
{
    *done = false;
    const int rank = trn_dist_rank(dist), world = trn_dist_world(dist);
    const int L = local_world > 0 ? local_world : 1, nodes = (world + L - 1) / L;
    if (!peers_join(A, src, dist, L)) return 0;
    char err[1024] = "";
    struct ffr_cache_shard *shards = NULL;
    uint32_t n = 0;
    uint64_t *counts = NULL;
    struct ffr_cache *c = NULL;
    struct ffio_http *origin = NULL;
    struct trn_sampler s;
    bool have_s = false;
    int rc = 0;
    /* 1. the cache, its origin the source and the other nodes its peers */
    struct ffr_cache_source cs;
    struct ffr_cache_peers hooks;
    struct ffr_cache_opts o = *co;
    if (ffio_http_is_url(src)) {
        rc = ffio_http_create(NULL, &origin);
        ffio_http_cache_source(origin, &cs);
        o.source = &cs;
    }
    if (rc == 0) {
        trn_peers_cache_hooks(g_peers, &hooks);
        o.peers = &hooks;
        rc = ffr_cache_open(&c, A->cache_dir, &o, err, sizeof err);
    }
    /* 2. the plan: the manifest's shards (a single file has none to share), the sampler's
     * epoch 0 */
    if (rc == 0) rc = ffr_cache_manifest_shards(c, src, &shards, &n, err, sizeof err);
    if (rc == 0 && n < 2) rc = 1;
    if (rc == 0 && !(counts = calloc(n, sizeof *counts))) rc = -ENOMEM;
    if (rc == 0) {
        struct trn_sampler_opts so;
        trn_sampler_opts_default(&so);
        for (uint32_t k = 0; k < n; k++)
            so.n += counts[k] = shards[k].records;
        so.seed = (uint64_t)A->seed;
        so.world_size = (uint32_t)world;
        so.rank = (uint32_t)rank;
        so.shard_counts = counts;
        so.n_shards = n;
        so.local_world_size = (uint32_t)L;
        rc = trn_sampler_init(&s, &so);
        have_s = rc == 0;
        if (rc < 0) snprintf(err, sizeof err, "the shard plan: %s", strerror(-rc));
    }
    /* 3. the fill, with the barrier every rank must reach */
    /* Every rank ready, or none fills with peers: a rank whose manifest read or plan failed
     * (or found a single file) must not leave the others waiting at the fill's barrier. */
    int64_t not_ready = rc != 0;
    if (trn_dist_allreduce_i64(dist, &not_ready, 1, TRN_DIST_SUM) < 0) not_ready = 1;
    struct trn_peers_fill_stats st = { 0 };
    uint64_t data_bytes = 0;
    for (uint32_t k = 0; k < n; k++)
        data_bytes += shards[k].bytes;
    struct fill_wait w = fill_wait(A, dist, data_bytes);
    const double t0 = trn_now_s();
    if (not_ready == 0)
        rc = trn_peers_fill(g_peers, c, &s, 0, src, shards, n, NULL, barrier_cb, &w, &st, err,
                            sizeof err);
    else if (rc == 0)
        rc = 1; /* another rank is not ready: no fill here either */
    ffr_cache_close(c);
    ffio_http_destroy(origin);
    if (have_s) trn_sampler_destroy(&s);
    free(counts);
    ffr_manifest_shards_free(shards, n);
    /* 4. one answer for the job (a node that failed makes every rank fall back alike), and
     * what the whole job fetched from where */
    if (rc < 0) say(A, TRN_LAUNCH_ERR, "rank %d: peers: %s", rank, err[0] ? err : strerror(-rc));
    int64_t sum[6] = {
        rc < 0,     st.from_peers, (int64_t)st.peer_bytes, st.from_origin, (int64_t)st.origin_bytes,
        st.peer_bad
    };
    /* a rank that ended its fill's phase 2 waits here for the slowest one */
    if (barrier_cb(&w) < 0 || trn_dist_allreduce_i64(dist, sum, 6, TRN_DIST_SUM) < 0) sum[0] = 1;
    const bool bad = sum[0] != 0;
    if (bad && rank == 0)
        say(A, TRN_LAUNCH_ERR, "peers: each node fills its cache from %s instead", src);
    else if (rank == 0 && rc == 0)
        say(A, TRN_LAUNCH_ERR,
            "peers: %d nodes filled their caches in %.1f s: %" PRId64
            " shard fetch(es) from the other nodes (%.1f MB), %" PRId64
            " from %s (%.1f MB, %.2fx the dataset)%s",
            nodes, trn_now_s() - t0, sum[1], (double)sum[2] / 1e6, sum[3], src,
            (double)sum[4] / 1e6, data_bytes ? (double)sum[4] / (double)data_bytes : 0.0,
            sum[5] ? "; a peer sent damaged bytes, fetched again from the origin" : "");
    *done = rc == 0 && !bad;
    return 0;
}

/* A node cache smaller than the dataset (trainer/data/node_cache.h), for the run's records:
 * trn_train_opts.epoch_data's context. */
struct partial {
    struct trn_node_cache *nc;
    struct trn_dist *dist;
    struct fill_wait wait; /* the fill's barriers (the node cache's and the sums') */
    const struct trn_launch_opts *A;
    uint64_t egress; /* the job's origin bytes so far (the ranks' sums) */
};
static struct partial g_part;

/* trn_train_opts.epoch_data: the node's shards of `epoch` into r; one answer for the job. */
static int partial_epoch(void *ctx, struct ffr_reader *r, int epoch, char *err, size_t cap)
{
    struct partial *P = ctx;
    struct trn_node_cache_stats st;
    const double t0 = trn_now_s();
    int rc = trn_node_cache_epoch(P->nc, r, (uint32_t)epoch, &st, err, cap);
    const int rank = trn_dist_rank(P->dist);
    if (rc < 0) say(P->A, TRN_LAUNCH_ERR, "rank %d: epoch %d's shards: %s", rank, epoch, err);
    int64_t sum[7] = { rc < 0,
                       st.from_peers,
                       (int64_t)st.peer_bytes,
                       st.from_origin,
                       (int64_t)st.origin_bytes,
                       st.swapped_out,
                       st.prefetched };
    if (barrier_cb(&P->wait) < 0 || trn_dist_allreduce_i64(P->dist, sum, 7, TRN_DIST_SUM) < 0)
        sum[0] = 1;
    if (sum[0]) {
        if (rc == 0)
            trn_seterr(err, cap, "another rank failed to fill its cache (its log says why)");
        return rc < 0 ? rc : -ECANCELED;
    }
    /* every node's shards are in place: the next epoch's may come while this one trains */
    const int pf = trn_node_cache_prefetch(P->nc);
    if (pf < 0)
        say(P->A, TRN_LAUNCH_ERR, "rank %d: no prefetch of epoch %d's shards: %s", rank, epoch + 1,
            strerror(-pf));
    const uint64_t data = trn_node_cache_dataset_bytes(P->nc, NULL);
    P->egress += (uint64_t)sum[4];
    if (rank == 0)
        say(P->A, TRN_LAUNCH_ERR,
            "cache: epoch %d: the nodes' shards in %.1f s: %" PRId64
            " fetch(es) from peers (%.1f MB), %" PRId64
            " from the origin (%.1f MB; %.2fx the dataset so far), %" PRId64
            " of them during the epoch before; %" PRId64 " shard(s) put back to their skeletons",
            epoch, trn_now_s() - t0, sum[1], (double)sum[2] / 1e6, sum[3], (double)sum[4] / 1e6,
            data ? (double)P->egress / (double)data : 0.0, sum[6], sum[5]);
    return 0;
}

/*
 * --cache-max below the dataset on several nodes: the run's records become a view of
 * skeletons, filled epoch by epoch (partial_epoch). Every rank calls it at the same point and
 * all agree. Returns 0 (o set up), 1 (not needed: the caller caches the dataset whole), or -1
 * after saying why.
 */
static int partial_open(const struct trn_launch_opts *A, const char *src, struct trn_dist *dist,
                        int local_world, struct trn_train_opts *o, char *local, size_t cap)
{
    const int rank = trn_dist_rank(dist), world = trn_dist_world(dist);
    const int L = local_world > 0 ? local_world : 1;
    if (!A->cache_max || (world + L - 1) / L < 2) return 1;
    const bool peers = peers_join(A, src, dist, L);
    struct trn_node_cache_opts no = {
        .dir = A->cache_dir,
        .src = src,
        .max_bytes = A->cache_max,
        .seed = (uint64_t)A->seed,
        .world_size = (uint32_t)world,
        .rank = (uint32_t)rank,
        .local_world_size = (uint32_t)L,
        .epochs = (uint32_t)A->epochs,
        .peers = peers ? g_peers : NULL,
        .barrier = barrier_cb,
        .barrier_ctx = &g_part.wait,
        .prefetch = true,
    };
    char err[1024] = "";
    trn_node_cache_close(g_part.nc);
    g_part = (struct partial){ .dist = dist, .A = A, .wait = { dist, A->dist_timeout } };
    const int rc = trn_node_cache_open(&no, &g_part.nc, local, cap, err, sizeof err);
    if (rc == 0) g_part.wait = fill_wait(A, dist, trn_node_cache_dataset_bytes(g_part.nc, NULL));
    /* 1 (cached whole) and errors are the same on every rank for the same dataset, except an
     * I/O failure: agree on it */
    int64_t v[2] = { rc < 0, rc == 1 };
    if (trn_dist_allreduce_i64(dist, v, 2, TRN_DIST_SUM) < 0) v[0] = 1;
    if (rc < 0) say(A, TRN_LAUNCH_ERR, "rank %d: --cache-max: %s", rank, err);
    if (v[0] || (v[1] && v[1] != world)) {
        if (rank == 0 && rc >= 0) say(A, TRN_LAUNCH_ERR, "--cache-max: another rank failed");
        trn_node_cache_close(g_part.nc);
        g_part.nc = NULL;
        return -1;
    }
    if (v[1]) return 1;
    uint32_t n = 0;
    const uint64_t data = trn_node_cache_dataset_bytes(g_part.nc, &n);
    if (rank == 0)
        say(A, TRN_LAUNCH_ERR,
            "%s: %.1f MB in %u shards, above --cache-max %.1f MB: each node caches the shards it "
            "reads in an epoch, before it (%s), and the skeletons of the others (their index) in "
            "%s",
            src, (double)data / 1e6, n, (double)A->cache_max / 1e6,
            peers ? "from the other nodes first" : "from the origin", A->cache_dir);
    o->epoch_data = partial_epoch;
    o->epoch_data_ctx = &g_part;
    o->local_world_size = L;
    return 0;
}

/* --cache-dir: the dataset's shards copied (or, for a URL, downloaded) into the
 * node-local cache, verified, and the cached manifest's path in local. Every local rank calls
 * it; the cache's locks fetch each shard once per node. With several nodes the nodes fill
 * from each other first (peer_fill). With o (the training records) and a --cache-max below the
 * dataset, the nodes cache one epoch's shards at a time instead (partial_open). Returns 0 or 1
 * (after saying why). */
static int cache_dataset(const struct trn_launch_opts *A, const char *src, struct trn_dist *dist,
                         int local_world, struct trn_train_opts *o, char *local, size_t cap)
{
    if (dist && o) {
        /* a cache smaller than the dataset holds one epoch's shards at a time */
        const int p = partial_open(A, src, dist, local_world, o, local, cap);
        if (p <= 0) return p < 0;
    }
    char err[1024] = "";
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.max_bytes = A->cache_max;
    bool peered = false;
    if (dist && peer_fill(A, src, dist, local_world, &co, &peered)) return 1;
    const int rc = ffio_cache_dataset(A->cache_dir, &co, src, local, cap, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "--cache-dir %s: %s", A->cache_dir, err[0] ? err : ffr_strerror(rc));
        return 1;
    }
    if (rc > 0)
        say(A, TRN_LAUNCH_ERR, "%s: %d shard(s) fetched into %s, every byte verified", src, rc,
            A->cache_dir);
    else if (peered)
        say(A, TRN_LAUNCH_ERR, "%s: every shard in %s, every byte verified", src, A->cache_dir);
    else
        say(A, TRN_LAUNCH_ERR,
            "%s: every shard reused from %s (size, trailer and index checked; each record is "
            "checked as it is read, and a shard with a damaged record is evicted)",
            src, A->cache_dir);
    return 0;
}

/*
 * --batch-size -1, train.py's check_train_batch_size -> autobatch: on a GPU, the net's device
 * memory at batch 1 and 2 (trn_net_memory_bytes, the training net as the run builds it) gives
 * a line, and the batch is the largest whose memory fits AUTOBATCH_FRACTION of the device's
 * free memory; on the CPU ultralytics' default 16. Returns the batch, or -1 after saying why.
 */
#define AUTOBATCH_FRACTION 0.6
static long autobatch(const struct trn_launch_opts *A, const char *cfg_path, int gpu)
{
    if (gpu < 0) {
        say(A, TRN_LAUNCH_OUT, "AutoBatch: CUDA not detected, using default CPU batch-size 16");
        return 16;
    }
    struct trn_model *m = NULL;
    char err[512] = "";
    if (trn_weights_load(A->weights, A->weights ? NULL : cfg_path, (int)A->nc, &m, NULL, NULL, err,
                         sizeof err) < 0) {
        say(A, TRN_LAUNCH_ERR, "AutoBatch: %s", err);
        return -1;
    }
    size_t bytes[2] = { 0, 0 }, used = 0, total = 0;
    int rc = 0;
    for (int b = 1; b <= 2 && rc == 0; b++) {
        struct trn_net_opts no;
        trn_net_opts_default(&no);
        no.device = gpu;
        no.train = true;
        struct trn_net *net = NULL;
        rc = trn_net_create(m, b, (int)A->img, (int)A->img, &no, &net, err, sizeof err);
        if (rc == 0) bytes[b - 1] = trn_net_memory_bytes(net);
        trn_net_destroy(net);
    }
    trn_model_destroy(m);
    if (rc == 0) rc = kern_cuda_mem_info(&used, &total);
    if (rc < 0 || bytes[1] <= bytes[0]) {
        say(A, TRN_LAUNCH_ERR, "AutoBatch: cannot measure the net on CUDA device %d (%s)", gpu,
            err[0] ? err : trn_strerror(rc));
        return -1;
    }
    const double gb = 1 << 30, per = (double)(bytes[1] - bytes[0]), fixed = (double)bytes[0] - per;
    const double freeb = (double)(total - used);
    say(A, TRN_LAUNCH_OUT, "AutoBatch: CUDA:%d %.2fG total, %.2fG used, %.2fG free", gpu,
        total / gb, used / gb, freeb / gb);
    long b = (long)((freeb * AUTOBATCH_FRACTION - fixed) / per);
    if (b < 1) {
        say(A, TRN_LAUNCH_OUT,
            "AutoBatch: WARNING: the model does not fit at batch 1 within %.0f%%; using batch-size "
            "16",
            AUTOBATCH_FRACTION * 100);
        return 16;
    }
    if (b > 65536) b = 65536;
    const double frac = (fixed + per * (double)b + (double)used) / (double)total;
    say(A, TRN_LAUNCH_OUT, "AutoBatch: Using batch-size %ld for CUDA:%d %.2fG/%.2fG (%.0f%%)", b,
        gpu, frac * total / gb, total / gb, frac * 100);
    return b;
}

static int do_train(const struct trn_launch_opts *A, const struct trn_hyp *hyp,
                    const char *cfg_path, struct trn_dist *dist, int local_world,
                    const char *evolve_dir, struct trn_train_result *res_out)
{
    struct trn_train_opts o;
    trn_train_opts_default(&o);
    char dir[PATH_MAX - 64], ckpt[PATH_MAX];
    int rc;
    const int rank = trn_dist_rank(dist);
    if (A->resume) {
        rc = find_resume(A, ckpt, sizeof ckpt, dir, sizeof dir);
        if (rc < 0) {
            say(A, TRN_LAUNCH_ERR,
                "--resume: no checkpoint at %s: %s\nhint: give the run directory (runs/train/exp) "
                "or its weights/last.ckpt",
                A->resume[0] ? A->resume : A->project, strerror(-rc));
            return 1;
        }
        o.resume = ckpt;
        o.resume_other_data = A->resume_other_data;
    } else if (evolve_dir) {
        snprintf(dir, sizeof dir, "%s", evolve_dir);
        o.evolve = true;
    } else if (rank == 0) {
        rc = trn_run_dir(A->project, A->name, A->exist_ok, dir, sizeof dir);
        if (rc < 0) {
            say(A, TRN_LAUNCH_ERR,
                "cannot create the run directory %s/%s: %s\nhint: choose a writable --project",
                A->project, A->name, strerror(-rc));
            return 1;
        }
    }
    if (rank != 0) {
        /* rank 0 speaks for the job; the others only report their own failures */
    } else if (A->nosave || A->save_period != -1)
        say(A, TRN_LAUNCH_ERR, "note: --nosave and --save-period are not used yet");
    if (rank == 0 && A->noval && !A->val_records)
        say(A, TRN_LAUNCH_ERR, "note: --noval without --val-records: nothing to validate");
    o.gpu = pick_gpu(A, dist ? trn_dist_local_rank(dist) : 0);
    if (o.gpu == -2) return 1;
    if (rank == 0 && o.gpu >= 0)
        say(A, TRN_LAUNCH_ERR,
            "the network runs on CUDA device %d; with SGD the loss, optimizer and EMA too (the "
            "resident step); validation on the CPU",
            o.gpu);
    o.records = A->records;
    o.val_records = A->val_records;
    o.data = A->data ? A->data : A->data_source; /* the checkpoint names it */
    static char repacked[2][PATH_MAX];
    if (A->resume) {
        if (resume_records(A, ckpt, repacked[0], repacked[1], sizeof repacked[0], &o.data))
            return 1;
        if (repacked[0][0]) o.records = repacked[0];
        if (repacked[1][0]) o.val_records = repacked[1];
    }
    static char cached[2][PATH_MAX];
    if (A->cache_dir && A->records) {
        if (cache_dataset(A, A->records, dist, local_world, &o, cached[0], sizeof cached[0]))
            return 1;
        o.records = cached[0];
        o.cache_dir = A->cache_dir; /* a damaged cached shard is evicted (train.h) */
    }
    if (A->cache_dir && A->val_records) {
        if (cache_dataset(A, A->val_records, NULL, local_world, NULL, cached[1], sizeof cached[1]))
            return 1;
        o.val_records = cached[1];
    }
    if (A->cache_dir && (A->records || A->val_records) && trn_dist_world(dist) > 1) {
        /* every node's caches ready before the job's first collective of --dist-timeout */
        struct fill_wait w = fill_wait(
            A, dist, dataset_bytes(A->records ? o.records : NULL) + dataset_bytes(o.val_records));
        const double t0 = trn_now_s();
        if (barrier_cb(&w) < 0) {
            say(A, TRN_LAUNCH_ERR, "rank %d: waiting for the other nodes' caches: %s", rank,
                trn_dist_error(dist));
            return 1;
        }
        if (rank == 0 && trn_now_s() - t0 >= 1)
            say(A, TRN_LAUNCH_ERR, "cache: waited %.1f s for the other nodes' caches",
                trn_now_s() - t0);
    }
    if (!A->cache_dir && ((o.records && ffio_http_is_url(o.records)) ||
                          (o.val_records && ffio_http_is_url(o.val_records)))) {
        say(A, TRN_LAUNCH_ERR,
            "reading records by URL needs --cache-dir DIR (a node-local copy, verified)");
        return 1;
    }
    o.cfg = cfg_path;
    o.weights = A->weights;
    o.run_dir = rank == 0 || A->resume ? dir : NULL; /* only rank 0 writes */
    o.dist = dist;
    o.hyp_path = A->hyp;
    o.project = A->project;
    o.name = A->name;
    o.device = A->device ? A->device : "cpu";
    o.hyp = *hyp;
    o.img = (int)A->img;
    o.batch_size = (int)A->batch;
    if (A->batch == -1 && !A->resume) {
        /* train.py: RANK == -1 and batch_size == -1 only: every rank must agree on it */
        if (trn_dist_world(dist) > 1) {
            say(A, TRN_LAUNCH_ERR,
                "--batch-size -1 (AutoBatch) is for one process; give the global batch with "
                "several ranks");
            return 1;
        }
        const long b = autobatch(A, cfg_path, o.gpu);
        if (b < 0) return 1;
        o.batch_size = (int)b;
    }
    o.epochs = (int)A->epochs;
    o.nc = (int)A->nc;
    o.workers = (unsigned)A->workers;
    o.page_cache = A->page_cache;
    o.direct = A->direct;
    /* one compute thread per core (shared by the ranks of this node): OpenBLAS's own threads
     * beside the loader's oversubscribe */
    o.threads = trn_cli_threads(A->threads, local_world);
    o.seed = (uint64_t)A->seed;
    o.optimizer = !strcmp(A->optimizer, "Adam")    ? TRN_OPTIM_ADAM
                  : !strcmp(A->optimizer, "AdamW") ? TRN_OPTIM_ADAMW
                                                   : TRN_OPTIM_SGD;
    o.cos_lr = A->cos_lr;
    o.sync_bn = A->sync_bn; /* when resuming, the checkpoint's setting wins */
    o.device_path = A->device_path;
    o.host_aug = A->host_aug;
    o.cuda_graph = A->cuda_graph;
    o.any_algo = A->any_algo;
    o.cudnn_plan = A->cudnn_plan;
    o.cudnn_tune = A->cudnn_tune;
    o.noautoanchor = A->noautoanchor;
    o.noplots = A->noplots;
    o.cache_ram = A->cache && strcmp(A->cache, "disk") != 0;
    /* One copy per node for its ranks (--cache-share node, the default), keyed by what names
     * this job on every launcher: its rendezvous (MASTER_ADDR:MASTER_PORT), torchrun's run id,
     * Slurm's job and step, and the records. */
    static char share_key[1200];
    if (o.cache_ram && local_world > 1 && strcmp(A->cache_share, "rank") != 0) {
        const char *v[] = { getenv("MASTER_ADDR"), getenv("MASTER_PORT"),
                            getenv("TORCHELASTIC_RUN_ID"), getenv("SLURM_JOB_ID"),
                            getenv("SLURM_STEP_ID") };
        snprintf(share_key, sizeof share_key, "%.200s:%.16s|%.100s|%.32s.%.16s|%.600s",
                 v[0] ? v[0] : "", v[1] ? v[1] : "", v[2] ? v[2] : "", v[3] ? v[3] : "",
                 v[4] ? v[4] : "", o.records ? o.records : "");
        o.ram_share_key = share_key;
        o.ram_share_ranks = local_world;
    }
    if (A->cache && !strcmp(A->cache, "disk"))
        say(A, TRN_LAUNCH_ERR,
            "--cache disk: the records are already the decoded images on disk (train.py's .npy "
            "cache); nothing more to cache");
    o.label_smoothing = A->label_smoothing;
    o.single_cls = A->single_cls;
    o.image_weights = A->image_weights;
    o.rect = A->rect;
    o.multi_scale = A->multi_scale;
    /* train.py: freeze = [f'model.{x}.' for x in (freeze if len(freeze) > 1 else
     * range(freeze[0]))] */
    for (int i = 0; A->n_freeze == 1 && i < A->freeze[0]; i++)
        o.frozen[i / 64] |= UINT64_C(1) << (i % 64);
    for (int i = 0; A->n_freeze > 1 && i < A->n_freeze; i++)
        o.frozen[A->freeze[i] / 64] |= UINT64_C(1) << (A->freeze[i] % 64);
    o.cuda_graph_fail = A->cuda_graph_fail;
    o.amp = amp_dtype(A, o.gpu); /* when resuming, the checkpoint's */
    if (A->val_amp) {
        enum trn_amp_dtype v = TRN_AMP_OFF;
        trn_amp_dtype_parse(A->val_amp, &v);
        o.val_amp = v == TRN_AMP_BF16   ? KERN_DT_BF16
                    : v == TRN_AMP_FP16 ? KERN_DT_F16
                                        : KERN_DT_F32;
    }
    o.val_cpu_engine = cpu_engine(A);
    o.cpu_engine = o.val_cpu_engine; /* the training step and the validation alike */
    o.act_store = act_store(A);
    o.noval = A->noval;
    o.patience = (int)A->patience;
    o.stop_after = A->stop_after;
    o.amp_inf_ni = A->amp_inf_at;
    o.log = print_line;
    o.log_ctx = (void *)A;
    o.progress = A->progress;
    o.progress_ctx = A->progress_ctx;
    if (A->stop_arm && !(o.stop = A->stop_arm(A->stop_ctx))) {
        say(A, TRN_LAUNCH_ERR, "cannot set up the signal handling thread");
        return 1;
    }
    struct trn_train_result res;
    char err[1024] = "";
    rc = trn_train_run(&o, &res, err, sizeof err);
    /* a run that stopped early (patience, a signal) may still be prefetching the next epoch */
    trn_node_cache_close(g_part.nc);
    g_part.nc = NULL;
    if (rc < 0) {
        if (trn_dist_world(dist) > 1) {
            say(A, TRN_LAUNCH_ERR, "rank %d: %s", rank, err[0] ? err : trn_strerror(rc));
            say(A, TRN_LAUNCH_ERR, "rank %d: ending the job", rank);
            trn_dist_abort(dist, 1);
        }
        say(A, TRN_LAUNCH_ERR, "%s", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    if (rank == 0 && !evolve_dir)
        say(A, TRN_LAUNCH_OUT,
            "%lld batches, %.2f img/s training (%.2f img/s with validation and saving); %s",
            (long long)res.batches, res.train_images_per_s, res.images_per_s, res.last_path);
    if (res_out) *res_out = res;
    /* SIGTERM / SIGUSR1 are preemption: saved, so success; SIGINT is the user's stop */
    if (rc == TRN_TRAIN_STOPPED && res.stop_signal == SIGINT) return 128 + SIGINT;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --evolve: train.py's hyperparameter evolution (trainer/train/evolve.h)                     */

static int do_evolve(const struct trn_launch_opts *A, const struct trn_hyp *hyp,
                     const char *cfg_path, struct trn_dist *dist, int local_world)
{
    long gens = 300;
    char *end = NULL;
    if (A->evolve[0] && ((gens = strtol(A->evolve, &end, 10)) < 1 || *end || gens > 100000))
        return usage(A, "--evolve: '%s' is not a generation count (1..100000)", A->evolve);
    if (trn_dist_world(dist) > 1)
        return usage(A, "--evolve is not compatible with multi-process (DDP) training, as "
                        "in train.py");
    if (A->resume)
        return usage(A, "--evolve continues an evolution with --exist-ok, not "
                        "--resume");
    /* train.py: the default project becomes runs/evolve */
    struct trn_launch_opts B = *A;
    if (!strcmp(B.project, "runs/train")) B.project = "runs/evolve";
    char dir[PATH_MAX - 64];
    int rc = trn_run_dir(B.project, B.name, B.exist_ok, dir, sizeof dir);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "cannot create the run directory %s/%s: %s", B.project, B.name,
            strerror(-rc));
        return 1;
    }
    const bool anchors = !A->noautoanchor; /* train.py: del hyp['anchors'] with --noautoanchor */
    char err[1024] = "", msg[8192];
    for (long g = 0; g < gens; g++) {
        double *rows = NULL, v[TRN_EVOLVE_MAX];
        int nr = 0;
        if ((rc = trn_evolve_csv_read(dir, anchors, &rows, &nr, err, sizeof err)) < 0) break;
        if (nr > 0)
            trn_evolve_mutate(rows, nr, anchors, (uint64_t)A->seed, (uint32_t)nr, v);
        else
            trn_evolve_from_hyp(hyp, anchors, v);
        free(rows);
        trn_evolve_constrain(v, anchors);
        struct trn_hyp h = *hyp;
        trn_evolve_to_hyp(v, anchors, &h);
        struct trn_train_result res;
        if (do_train(&B, &h, cfg_path, dist, local_world, dir, &res) != 0) return 1;
        if (res.epoch < A->epochs) {
            say(A, TRN_LAUNCH_ERR,
                "--evolve: generation %d stopped before its last epoch; evolve.csv keeps the %d "
                "finished (continue with --exist-ok)",
                nr, nr);
            return 1;
        }
        const struct trn_train_metrics *m = &res.results;
        const double r[TRN_EVOLVE_RESULT] = { m->precision, m->recall, m->map50, m->map,
                                              m->box,       m->obj,    m->cls };
        if ((rc = trn_evolve_record(dir, anchors, r, v, msg, sizeof msg, err, sizeof err)) < 0)
            break;
        say(A, TRN_LAUNCH_OUT, "%s\n", msg);
    }
    if (rc == 0 && (rc = trn_evolve_plot(dir, anchors, msg, sizeof msg, err, sizeof err)) == 0)
        say(A, TRN_LAUNCH_OUT,
            "%s\nHyperparameter evolution finished %ld generations\nResults saved to %s\nUsage "
            "example: $ yolo-train --hyp %s/hyp_evolve.yaml",
            msg, gens, dir, dir);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "--evolve: %s", err);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* --nproc-per-node: local ranks started by this process                                    */

#define RANKS_GRACE_S 5.0 /* after a rank fails, the others' time to end before SIGKILL */

static void launch_log(void *ctx, const char *line)
{
    say(ctx, TRN_LAUNCH_ERR, "%s", line);
}

/* --nproc-per-node N: this command line without the option, run N times (dist.h). --data was
 * resolved here, once: the ranks get the packs it names (--records, --val-records, and
 * --data-source for the checkpoint) instead, so that none checks the pack cache again or could
 * find another pack than its peers. */
static int spawn_local_ranks(const struct trn_launch_opts *A, int argc, char **argv)
{
    char **cargv = calloc((size_t)argc + 7, sizeof *cargv);
    if (!cargv) {
        say(A, TRN_LAUNCH_ERR, "out of memory");
        return 1;
    }
    const bool resolved = A->data && !A->resume;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--nproc-per-node") || (resolved && !strcmp(argv[i], "--data"))) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--nproc-per-node=", 17) ||
            (resolved && !strncmp(argv[i], "--data=", 7)))
            continue;
        cargv[n++] = argv[i];
    }
    if (resolved) {
        cargv[n++] = "--records";
        cargv[n++] = (char *)A->records;
        if (A->val_records) {
            cargv[n++] = "--val-records";
            cargv[n++] = (char *)A->val_records;
        }
        cargv[n++] = "--data-source";
        cargv[n++] = (char *)A->data;
    }
    const int rc =
        trn_dist_launch_local((int)A->nproc, cargv, RANKS_GRACE_S, launch_log, (void *)A);
    free(cargv);
    return rc;
}

/* Join the job the launcher's variables describe (a communicator of one without them). */
static int join_job(const struct trn_launch_opts *A, struct trn_dist **dist, int *local_world)
{
    extern char **environ;
    struct trn_dist_env env;
    char err[768] = "";
    if (trn_dist_env_parse((const char *const *)environ, &env, err, sizeof err) < 0) {
        say(A, TRN_LAUNCH_ERR, "launcher environment: %s", err);
        return 1;
    }
    *local_world = env.local_world_size;
    snprintf(g_master_addr, sizeof g_master_addr, "%s", env.master_addr);
    struct trn_dist_opts o;
    trn_dist_opts_default(&o);
    trn_dist_backend_parse(A->dist_backend, &o.backend);
    o.timeout_s = A->dist_timeout;
    o.bucket_bytes = (size_t)(A->bucket_cap_mb * 1048576.0);
    o.overlap = !A->no_grad_overlap;
    const int rc = trn_dist_create(&env, &o, dist, err, sizeof err);
    if (rc < 0) {
        say(A, TRN_LAUNCH_ERR, "rank %d of %d: cannot join the job: %s", env.rank, env.world_size,
            err[0] ? err : trn_dist_strerror(rc));
        return 1;
    }
    if (env.world_size > 1)
        say(A, TRN_LAUNCH_ERR, "rank %d of %d (local %d, pid %ld) joined over %s", env.rank,
            env.world_size, env.local_rank, (long)getpid(),
            trn_dist_backend_name(trn_dist_backend(*dist)));
    return 0;
}

int trn_launch(struct trn_launch_opts *A, int argc, char **argv)
{
    int rc = 0;
    if (A->summary) {
        if (!A->cfg) return usage(A, "--summary needs --cfg MODEL (e.g. --cfg yolov5s)");
        return do_summary(A);
    }
    if (A->bench_step) {
        if (!A->cfg) return usage(A, "--bench needs --cfg MODEL (e.g. --cfg yolov5s)");
        return do_bench_step(A);
    }
    static char data_train[4096], data_val[4096];
    if (A->data && (A->records || A->val_records))
        return usage(A, "--data packs the records itself: give --data or --records");
    if (A->data && !A->pack) return usage(A, "--data: this program packs no datasets");
    if (A->data && !A->resume) {
        rc = A->pack(A->pack_ctx, A->data, "train", (int)A->img, data_train, sizeof data_train);
        if (rc == 1) say(A, TRN_LAUNCH_ERR, "--data %s: no train split", A->data);
        if (rc) return 1;
        A->records = data_train;
        rc = A->pack(A->pack_ctx, A->data, "val", (int)A->img, data_val, sizeof data_val);
        if (rc < 0) return 1;
        if (rc == 0) A->val_records = data_val;
        rc = 0;
    }
    if (!A->records && !A->resume)
        return usage(A, "--data DATA.yaml or --records FILE is required");

    struct trn_hyp hyp;
    trn_hyp_default(&hyp);
    if (A->hyp) {
        char err[512];
        if (trn_hyp_load(A->hyp, log_cb, A, &hyp, err, sizeof err) < 0) {
            say(A, TRN_LAUNCH_ERR, "%s", err);
            return 1;
        }
    }
    if (A->bench || A->plot) {
        if (!A->records) return usage(A, "--bench-data and --plot need --records FILE");
        if (A->plot) rc = do_plot(A, &hyp);
        if (rc == 0 && A->bench) rc = do_bench(A, &hyp);
        /* cairo's and fontconfig's caches, so that leak checkers see a clean exit */
        trn_plots_cleanup();
        return rc;
    }
    if (A->nproc > 1) {
        if (getenv("RANK") || getenv("SLURM_PROCID") || getenv("OMPI_COMM_WORLD_RANK"))
            return usage(A, "--nproc-per-node: this process is already a rank of a job (RANK, "
                            "SLURM_PROCID or OMPI_COMM_WORLD_RANK is set)");
        return spawn_local_ranks(A, argc, argv);
    }
    struct trn_dist *dist = NULL;
    int local_world = 1;
    if ((rc = join_job(A, &dist, &local_world)) != 0) return rc;
    if (A->cfg && !A->resume) {
        char path[PATH_MAX];
        if (trn_model_cfg_find(A->cfg, A->models_dir, path, sizeof path)) {
            say(A, TRN_LAUNCH_ERR,
                "%s: model yaml not found\nhint: give a path, or a name from models "
                "(yolov5n/s/m/l/x)",
                A->cfg);
            trn_dist_destroy(dist);
            return 1;
        }
        rc = A->evolve ? do_evolve(A, &hyp, path, dist, local_world)
                       : do_train(A, &hyp, path, dist, local_world, NULL, NULL);
    } else if (A->resume || A->weights) {
        rc = A->evolve ? do_evolve(A, &hyp, NULL, dist, local_world)
                       : do_train(A, &hyp, NULL, dist, local_world, NULL, NULL);
    } else {
        trn_dist_destroy(dist);
        return usage(A, "training needs --cfg MODEL (e.g. --cfg yolov5n), --weights FILE "
                        "or --resume");
    }
    trn_peers_destroy(g_peers);
    g_peers = NULL;
    trn_dist_destroy(dist);
    /* results.png drew text: cairo's and fontconfig's caches, for a clean exit under leak checks */
    trn_plots_cleanup();
    return rc;
}
