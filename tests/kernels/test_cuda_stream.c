/*
 * Queues and events on a CUDA context (kern.h "Queues and events"), the behaviour a GPU adds to
 * the CPU semantics of test_stream.c:
 *   - a big H2D copy (256 MiB from pinned memory, fresh random data each run) on the copy queue
 *     while the compute queue runs a long op; the compute queue waits on the copy's event and an
 *     op there reads the copied data: it sees all of it (the destination was poisoned first, so a
 *     read that overtook the copy shows up as a difference);
 *   - the pinned source reused after kern_event_sync: the device holds the old contents, and a
 *     second upload from the rewritten source the new ones;
 *   - a second thread uploading on the copy queue while the ops thread runs ops;
 *   - a query of pending work returns 0 and does not fail the next op's launch check;
 *   - graph capture: record / wait on the compute queue inside the captured fn fail the capture
 *     with -ENOTSUP (and the context works after), while another thread keeps uploading on the
 *     copy queue during a capture that succeeds;
 *   - errors: a CPU event waited on by a CUDA context, a CUDA event recorded on a CPU one.
 * The wall times of the copy, the op and both together are printed (diagnostics, not checks).
 * Exits 77 with "# SKIP no CUDA device" when no device is visible (registered with the
 * exit-code protocol, CUDA builds only).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"

#define BIG    ((size_t)64 << 20) /* floats: 256 MiB */
#define SMALL  ((size_t)1 << 20)  /* floats per upload of the threaded test */
#define ROUNDS 16

static const struct kern_ops *K;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static float *pinned(size_t n)
{
    void *p = NULL;
    const cudaError_t e = cudaMallocHost(&p, n * sizeof(float));
    if (e != cudaSuccess) kct_bail("cudaMallocHost", cudaGetErrorString(e));
    return p;
}

/* Keeps the compute queue busy for a while: `rounds` EMA passes over n floats. */
static int busy(float *ema, const float *x, size_t n, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        const int rc = K->ema_update(g_gpu, ema, x, n, 0.999f, 0.001f);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Whether host floats got[i] == want[i] + add for all i; reports the first mismatch. */
static int equal_plus(const float *got, const float *want, size_t n, float add)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] + add) {
            tap_diag("first mismatch at %zu: %g, want %g", i, got[i], want[i] + add);
            return 0;
        }
    return 1;
}

static void test_overlap(void)
{
    const size_t bytes = BIG * sizeof(float);
    float *src = pinned(BIG), *host = malloc(bytes);
    kt_fill(src, BIG, -8.0f, 8.0f);
    float *dst = kct_poison(bytes), *ones = kct_alloc(bytes), *y = kct_poison(bytes);
    float *ema = kct_alloc(bytes);
    for (size_t i = 0; i < BIG; i++)
        host[i] = 1.0f;
    kct_put(ones, host, bytes);
    kct_put(ema, host, bytes);
    struct kern_event *ev = NULL;
    CK(kern_event_create(g_gpu, &ev));
    if (!ev) return;

    /* Times alone, then together (diagnostics). */
    double t0 = now_ms();
    CK(kern_mem_copy_on(g_gpu, KERN_QUEUE_COPY, dst, src, bytes, KERN_COPY_H2D));
    CK(kern_event_record(g_gpu, KERN_QUEUE_COPY, ev));
    CK(kern_event_sync(ev));
    const double t_copy = now_ms() - t0;
    t0 = now_ms();
    CK(busy(ema, ones, BIG, 8));
    CK(kern_cuda_ctx_sync(g_gpu));
    const double t_op = now_ms() - t0;

    /* Poison again; the op first, then the copy behind it on the other queue. */
    cudaError_t e = cudaMemset(dst, 0xA5, bytes);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) kct_bail("cudaMemset", cudaGetErrorString(e));
    t0 = now_ms();
    CK(busy(ema, ones, BIG, 8));
    CK(kern_mem_copy_on(g_gpu, KERN_QUEUE_COPY, dst, src, bytes, KERN_COPY_H2D));
    CK(kern_event_record(g_gpu, KERN_QUEUE_COPY, ev));
    const int pending = kern_event_query(ev);
    ok(pending == 0 || pending == 1, "query right after a 256 MiB copy: %d (0: still running)",
       pending);
    /* A query that found work pending must not fail the next op's launch check. */
    CK(kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, ev));
    CK(K->add_fwd(g_gpu, y, dst, ones, BIG));
    CK(kern_cuda_ctx_sync(g_gpu));
    const double t_both = now_ms() - t0;
    tap_diag("copy alone %.2f ms (%.1f GB/s), op alone %.2f ms, op + copy on two queues %.2f ms",
             t_copy, (double)bytes / t_copy / 1e6, t_op, t_both);
    float *got = malloc(bytes);
    kct_down(got, y, bytes);
    ok(equal_plus(got, src, BIG, 1.0f),
       "the compute queue waited on the copy's event: an op there read all %zu copied floats", BIG);

    /* The source is free once the event is synced: the device kept the old contents. */
    CK(kern_event_sync(ev));
    ok(kern_event_query(ev) == 1, "after kern_event_sync the event is complete");
    memcpy(host, src, bytes);
    for (size_t i = 0; i < BIG; i++)
        src[i] = -src[i] - 0.5f;
    CK(kern_mem_copy_on(g_gpu, KERN_QUEUE_COPY, got, dst, bytes, KERN_COPY_D2H));
    ok(equal_plus(got, host, BIG, 0.0f),
       "pinned source rewritten after kern_event_sync: the device has what was uploaded");
    CK(kern_mem_copy_on(g_gpu, KERN_QUEUE_COPY, dst, src, bytes, KERN_COPY_H2D));
    CK(kern_event_record(g_gpu, KERN_QUEUE_COPY, ev));
    CK(kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, ev));
    CK(kern_mem_copy_on(g_gpu, KERN_QUEUE_COMPUTE, got, dst, bytes, KERN_COPY_D2H));
    ok(equal_plus(got, src, BIG, 0.0f), "and a second upload from it the new contents");

    kern_event_destroy(ev);
    cudaFree(dst);
    cudaFree(ones);
    cudaFree(y);
    cudaFree(ema);
    cudaFreeHost(src);
    free(host);
    free(got);
}

/* A second thread uploads ROUNDS batches into two device buffers, as the loader's workers. */
struct feeder {
    const float *data; /* ROUNDS * SMALL, host */
    float *src[2];     /* pinned staging */
    float *dev[2];
    struct kern_event *up[2];
    struct kern_event *used[2]; /* recorded on the compute queue after the op read dev */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int produced, consumed, rc;
    int stop_after; /* ROUNDS */
};

static void *feed(void *arg)
{
    struct feeder *f = arg;
    for (int b = 0; b < f->stop_after; b++) {
        const int s = b % 2;
        pthread_mutex_lock(&f->mu);
        while (f->consumed < b - 1)
            pthread_cond_wait(&f->cv, &f->mu);
        pthread_mutex_unlock(&f->mu);
        int rc = kern_event_sync(f->up[s]);
        if (rc == 0) memcpy(f->src[s], f->data + (size_t)b * SMALL, SMALL * sizeof(float));
        /* The copy queue waits for the op that read dev[s] last (device side). */
        if (rc == 0) rc = kern_event_wait(g_gpu, KERN_QUEUE_COPY, f->used[s]);
        if (rc == 0)
            rc = kern_mem_copy_on(g_gpu, KERN_QUEUE_COPY, f->dev[s], f->src[s],
                                  SMALL * sizeof(float), KERN_COPY_H2D);
        if (rc == 0) rc = kern_event_record(g_gpu, KERN_QUEUE_COPY, f->up[s]);
        if (rc < 0) printf("# feeder: %s\n", kern_stream_last_error());
        pthread_mutex_lock(&f->mu);
        if (rc < 0 && !f->rc) f->rc = rc;
        f->produced = b + 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
    }
    return NULL;
}

static int feeder_init(struct feeder *f, const float *data)
{
    memset(f, 0, sizeof *f);
    f->data = data;
    f->stop_after = ROUNDS;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    for (int s = 0; s < 2; s++) {
        f->src[s] = pinned(SMALL);
        f->dev[s] = kct_poison(SMALL * sizeof(float));
        if (kern_event_create(g_gpu, &f->up[s]) < 0 || kern_event_create(g_gpu, &f->used[s]) < 0)
            return -1;
    }
    return 0;
}

static void feeder_fini(struct feeder *f)
{
    for (int s = 0; s < 2; s++) {
        kern_event_destroy(f->up[s]);
        kern_event_destroy(f->used[s]);
        cudaFreeHost(f->src[s]);
        cudaFree(f->dev[s]);
    }
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

/* The ops thread's side of batch b: wait (device), op, mark the buffer used, hand back. */
static int consume(struct feeder *f, int b, float *y, const float *ones, float *sum_dev)
{
    const int s = b % 2;
    pthread_mutex_lock(&f->mu);
    while (f->produced <= b)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    int rc = kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, f->up[s]);
    if (rc == 0) rc = K->add_fwd(g_gpu, y, f->dev[s], ones, SMALL);
    /* sum_dev += y: keeps every batch's contribution (checked at the end) */
    if (rc == 0) rc = K->add_fwd(g_gpu, sum_dev, sum_dev, y, SMALL);
    if (rc == 0) rc = kern_event_record(g_gpu, KERN_QUEUE_COMPUTE, f->used[s]);
    pthread_mutex_lock(&f->mu);
    f->consumed = b + 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void test_thread(void)
{
    float *data = malloc(ROUNDS * SMALL * sizeof(float));
    for (size_t i = 0; i < ROUNDS * SMALL; i++)
        data[i] = (float)kt_randint(-1000, 1000); /* integers: the sums are exact */
    float *host = malloc(SMALL * sizeof(float)), *want = calloc(SMALL, sizeof(float));
    for (size_t i = 0; i < SMALL; i++)
        host[i] = 1.0f;
    for (int b = 0; b < ROUNDS; b++)
        for (size_t i = 0; i < SMALL; i++)
            want[i] += data[(size_t)b * SMALL + i] + 1.0f;
    float *ones = kct_up(host, SMALL * sizeof(float)), *y = kct_poison(SMALL * sizeof(float));
    float *sum = kct_alloc(SMALL * sizeof(float));
    cudaMemset(sum, 0, SMALL * sizeof(float));
    cudaDeviceSynchronize();
    struct feeder f;
    if (!ok(feeder_init(&f, data) == 0, "feeder buffers and events")) return;
    pthread_t th;
    const int started = pthread_create(&th, NULL, feed, &f) == 0;
    int rc = started ? 0 : -EAGAIN;
    for (int b = 0; started && b < ROUNDS; b++) {
        const int c = consume(&f, b, y, ones, sum);
        if (c < 0 && rc == 0) rc = c;
    }
    if (started) pthread_join(th, NULL);
    float *got = malloc(SMALL * sizeof(float));
    kct_down(got, sum, SMALL * sizeof(float));
    ok(rc == 0 && f.rc == 0 && equal_plus(got, want, SMALL, 0.0f),
       "%d uploads by a second thread on the copy queue, each waited for on the compute queue and "
       "each buffer reused only after the op that read it: the exact sum",
       ROUNDS);
    feeder_fini(&f);
    cudaFree(ones);
    cudaFree(y);
    cudaFree(sum);
    free(data);
    free(host);
    free(want);
    free(got);
}

struct cap_arg {
    struct kern_event *ev;
    int what; /* 0: wait on compute, 1: record on compute, 2: ops only */
    float *y;
    const float *a, *b;
};

static int captured(void *arg)
{
    struct cap_arg *c = arg;
    if (c->what == 0) {
        const int rc = kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, c->ev);
        if (rc < 0) return rc;
    } else if (c->what == 1) {
        const int rc = kern_event_record(g_gpu, KERN_QUEUE_COMPUTE, c->ev);
        if (rc < 0) return rc;
    }
    return K->add_fwd(g_gpu, c->y, c->a, c->b, SMALL);
}

static void test_capture(void)
{
    float *host = malloc(SMALL * sizeof(float));
    kt_fill(host, SMALL, -1.0f, 1.0f);
    float *a = kct_up(host, SMALL * sizeof(float)), *b = kct_up(host, SMALL * sizeof(float));
    float *y = kct_poison(SMALL * sizeof(float));
    struct kern_event *ev = NULL;
    CK(kern_event_create(g_gpu, &ev));
    struct cap_arg c = { ev, 0, y, a, b };
    struct kern_graph *g = NULL;
    static const char *const name[2] = { "kern_event_wait", "kern_event_record" };
    for (int w = 0; w < 2; w++) {
        c.what = w;
        const int rc = kern_graph_capture(g_gpu, captured, &c, &g);
        const char *why = kern_cuda_ctx_last_error(g_gpu);
        ok(rc == -ENOTSUP && !g && strstr(why, name[w]),
           "%s on the compute queue inside a capture: the capture fails with -ENOTSUP (%s)",
           name[w], why);
        kern_graph_destroy(g);
        g = NULL;
        CK(K->add_fwd(g_gpu, y, a, b, SMALL));
        CK(kern_cuda_ctx_sync(g_gpu));
    }

    /* A capture of ops while another thread uploads on the copy queue. */
    float *data = malloc(ROUNDS * SMALL * sizeof(float));
    for (size_t i = 0; i < ROUNDS * SMALL; i++)
        data[i] = (float)kt_randint(-1000, 1000);
    struct feeder f;
    if (!ok(feeder_init(&f, data) == 0, "feeder for the capture")) return;
    f.stop_after = 2; /* two uploads, not consumed before the capture ends */
    pthread_t th;
    const int started = pthread_create(&th, NULL, feed, &f) == 0;
    c.what = 2;
    const int rc = kern_graph_capture(g_gpu, captured, &c, &g);
    if (started) pthread_join(th, NULL);
    ok(rc == 0 && g && f.rc == 0,
       "a capture of ops succeeds while another thread uploads on the copy queue (%s)",
       kern_cuda_ctx_last_error(g_gpu));
    CK(kern_graph_replay(g));
    float *got = malloc(SMALL * sizeof(float));
    kct_down(got, y, SMALL * sizeof(float));
    int eq = 1;
    for (size_t i = 0; i < SMALL && eq; i++)
        eq = got[i] == host[i] + host[i];
    ok(eq, "and its replay computes the captured op");
    for (int s = 0; s < 2; s++) {
        CK(kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, f.up[s]));
        kct_down(got, f.dev[s], SMALL * sizeof(float));
        ok(equal_plus(got, data + (size_t)s * SMALL, SMALL, 0.0f),
           "the upload %d made during the capture landed", s);
    }
    kern_graph_destroy(g);
    feeder_fini(&f);
    kern_event_destroy(ev);
    cudaFree(a);
    cudaFree(b);
    cudaFree(y);
    free(host);
    free(data);
    free(got);
}

static void test_errors(void)
{
    struct kern_event *ce = NULL, *ge = NULL;
    CK(kern_event_create(g_cpu, &ce));
    CK(kern_event_create(g_gpu, &ge));
    ok(kern_event_wait(g_gpu, KERN_QUEUE_COMPUTE, ce) == -KERN_EBACKEND,
       "a CPU event waited on by a CUDA context: -KERN_EBACKEND");
    ok(kern_event_record(g_cpu, KERN_QUEUE_COPY, ge) == -EINVAL,
       "a CUDA event recorded on a CPU context: -EINVAL");
    ok(kern_event_record(g_gpu, 3, ge) == -EINVAL &&
           kern_mem_copy_on(g_gpu, 3, ge, ge, 4, KERN_COPY_D2D) == -EINVAL,
       "bad queue: -EINVAL");
    ok(kern_event_query(ge) == 1 && kern_event_sync(ge) == 0, "a new CUDA event is complete");
    kern_event_destroy(ce);
    kern_event_destroy(ge);
}

int main(int argc, char **argv)
{
    kct_start(argc, argv);
    K = kern_ops_cuda();
    if (!ok(K != NULL, "the CUDA op table")) return tap_done();
    test_errors();
    test_overlap();
    test_thread();
    test_capture();
    kct_end();
    return tap_done();
}
