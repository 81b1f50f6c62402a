/*
 * Queues and events on a CPU context (kern.h "Queues and events"): kern_mem_copy_on on both
 * queues and every direction (random data, canaries around the destination), events always
 * complete, record / wait / query / sync, argument errors (NULL, bad queue and direction, an
 * event of another context) with nothing written, the per-thread failure text, and the loader's
 * pattern from a second thread: a producer uploads batches into two device-side buffers on the
 * copy queue, records an event per buffer and syncs it before reusing its source, while the
 * ops thread waits on the event and reduces the buffer with an op of a 3-thread context; the
 * sums equal a direct computation. The CUDA behaviour (overlap, device-side waits, capture) is
 * tests/kernels/test_cuda_stream.c.
 * Usage: test_kern_stream [--seed N]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"
#include "kern_testutil.h"
#include "tap.h"

#define N_COPY  (1u << 18) /* floats per copy: 1 MiB */
#define N_BATCH 4096       /* floats per uploaded batch */
#define BATCHES 64

static float *fill_random(size_t n)
{
    float *p = malloc(n * sizeof *p);
    kt_fill(p, n, -4.0f, 4.0f);
    return p;
}

/* Destination with a canary before and after n floats; returns the first of the n. */
static float *guarded(size_t n)
{
    float *p = malloc((n + 2) * sizeof *p);
    for (size_t i = 0; i < n + 2; i++)
        p[i] = kt_canary();
    return p + 1;
}

static int canaries_intact(const float *d, size_t n)
{
    return kt_is_canary(d[-1]) && kt_is_canary(d[n]);
}

static int all_canary(const float *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!kt_is_canary(d[i])) return 0;
    return 1;
}

static void test_copies(struct kern_ctx *k)
{
    float *src = fill_random(N_COPY);
    static const char *const qn[2] = { "compute", "copy" };
    static const char *const dn[4] = { "", "H2D", "D2H", "D2D" };
    for (int q = KERN_QUEUE_COMPUTE; q <= KERN_QUEUE_COPY; q++)
        for (int dir = KERN_COPY_H2D; dir <= KERN_COPY_D2D; dir++) {
            float *dst = guarded(N_COPY);
            const int rc = kern_mem_copy_on(k, q, dst, src, N_COPY * sizeof(float), dir);
            ok(rc == 0 && memcmp(dst, src, N_COPY * sizeof(float)) == 0 &&
                   canaries_intact(dst, N_COPY),
               "%s queue, %s: %u random floats copied, nothing around them touched", qn[q], dn[dir],
               N_COPY);
            free(dst - 1);
        }
    /* Overlapping ranges are a memmove, as kern_mem_copy. */
    float *buf = malloc(2 * N_BATCH * sizeof *buf);
    memcpy(buf, src, 2 * N_BATCH * sizeof *buf);
    int rc =
        kern_mem_copy_on(k, KERN_QUEUE_COPY, buf + 7, buf, N_BATCH * sizeof *buf, KERN_COPY_D2D);
    ok(rc == 0 && memcmp(buf + 7, src, N_BATCH * sizeof *buf) == 0,
       "copy queue, overlapping D2D: the source as it was");
    free(buf);

    float *dst = guarded(16);
    rc = kern_mem_copy_on(k, KERN_QUEUE_COPY, NULL, NULL, 0, KERN_COPY_H2D);
    ok(rc == 0, "0 bytes with NULL pointers: 0");
    const int bad_q[2] = { -1, 2 };
    for (int i = 0; i < 2; i++) {
        rc = kern_mem_copy_on(k, bad_q[i], dst, src, 16 * sizeof(float), KERN_COPY_H2D);
        ok(rc == -EINVAL && all_canary(dst, 16), "queue %d: -EINVAL, nothing written", bad_q[i]);
    }
    const int bad_dir[2] = { 0, KERN_COPY_D2D + 1 };
    for (int i = 0; i < 2; i++) {
        rc = kern_mem_copy_on(k, KERN_QUEUE_COPY, dst, src, 16 * sizeof(float), bad_dir[i]);
        ok(rc == -EINVAL && all_canary(dst, 16), "direction %d: -EINVAL, nothing written",
           bad_dir[i]);
    }
    ok(kern_mem_copy_on(NULL, KERN_QUEUE_COPY, dst, src, 64, KERN_COPY_H2D) == -EINVAL &&
           kern_mem_copy_on(k, KERN_QUEUE_COPY, NULL, src, 64, KERN_COPY_H2D) == -EINVAL &&
           kern_mem_copy_on(k, KERN_QUEUE_COPY, dst, NULL, 64, KERN_COPY_H2D) == -EINVAL &&
           all_canary(dst, 16),
       "NULL context, destination or source: -EINVAL, nothing written");
    const char *why = kern_stream_last_error();
    ok(strstr(why, "kern_mem_copy_on") && strstr(why, strerror(EINVAL)),
       "kern_stream_last_error names the call and the error: %s", why);
    free(dst - 1);
    free(src);
}

static void test_events(struct kern_ctx *k, struct kern_ctx *k3)
{
    struct kern_event *ev = NULL, *other = NULL;
    ok(kern_event_create(NULL, &ev) == -EINVAL && !ev, "create with a NULL context: -EINVAL");
    ok(kern_event_create(k, NULL) == -EINVAL, "create with a NULL out: -EINVAL");
    if (!ok(kern_event_create(k, &ev) == 0 && ev && kern_event_create(k3, &other) == 0 && other,
            "create on two contexts"))
        return;
    ok(kern_event_query(ev) == 1 && kern_event_sync(ev) == 0, "a new event is complete");
    ok(kern_event_record(k, KERN_QUEUE_COPY, ev) == 0 &&
           kern_event_record(k, KERN_QUEUE_COMPUTE, ev) == 0 && kern_event_query(ev) == 1 &&
           kern_event_sync(ev) == 0,
       "recorded on either queue: complete at once (the CPU ran the work before)");
    ok(kern_event_wait(k, KERN_QUEUE_COMPUTE, ev) == 0 &&
           kern_event_wait(k, KERN_QUEUE_COPY, ev) == 0 &&
           kern_event_wait(k, KERN_QUEUE_COMPUTE, other) == 0,
       "wait on either queue, also for another context's event: 0");
    ok(kern_event_record(k, KERN_QUEUE_COPY, other) == -EINVAL,
       "record of another context's event: -EINVAL (%s)", kern_stream_last_error());
    ok(kern_event_record(NULL, KERN_QUEUE_COPY, ev) == -EINVAL &&
           kern_event_record(k, KERN_QUEUE_COPY, NULL) == -EINVAL &&
           kern_event_record(k, 2, ev) == -EINVAL && kern_event_record(k, -1, ev) == -EINVAL,
       "record with NULL context or event, or a bad queue: -EINVAL");
    ok(kern_event_wait(NULL, KERN_QUEUE_COPY, ev) == -EINVAL &&
           kern_event_wait(k, KERN_QUEUE_COPY, NULL) == -EINVAL &&
           kern_event_wait(k, 2, ev) == -EINVAL,
       "wait with NULL context or event, or a bad queue: -EINVAL");
    ok(kern_event_sync(NULL) == -EINVAL && kern_event_query(NULL) == -EINVAL,
       "sync and query of NULL: -EINVAL");
    kern_event_destroy(NULL);
    kern_event_destroy(ev);
    kern_event_destroy(other);
    ok(1, "destroy (NULL too)");
}

/*
 * The loader's pattern. The producer owns src[2] (its "pinned" staging) and uploads batch b
 * from src[b % 2] into dev[b % 2] on the copy queue, records up[b % 2], and hands b over; before
 * it refills src[b % 2] for batch b + 2 it syncs up[b % 2] and waits until the ops thread has
 * consumed batch b (dev reuse: on a GPU an event on the compute queue; here the hand-off).
 */
struct pipe {
    struct kern_ctx *k;
    const float *data; /* BATCHES * N_BATCH */
    float *src[2], *dev[2];
    struct kern_event *up[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int produced, consumed; /* batches handed over / reduced */
    int rc;                 /* first producer failure */
    char why[256];          /* its kern_stream_last_error() */
};

static void *producer(void *arg)
{
    struct pipe *p = arg;
    for (int b = 0; b < BATCHES; b++) {
        const int s = b % 2;
        pthread_mutex_lock(&p->mu);
        while (p->consumed < b - 1)
            pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
        int rc = kern_event_sync(p->up[s]);
        if (rc == 0) {
            memcpy(p->src[s], p->data + (size_t)b * N_BATCH, N_BATCH * sizeof(float));
            rc = kern_mem_copy_on(p->k, KERN_QUEUE_COPY, p->dev[s], p->src[s],
                                  N_BATCH * sizeof(float), KERN_COPY_H2D);
        }
        if (rc == 0) rc = kern_event_record(p->k, KERN_QUEUE_COPY, p->up[s]);
        /* A failure of this thread is described to this thread only. */
        if (b == 5 && rc == 0)
            rc = kern_mem_copy_on(p->k, 7, p->dev[s], p->src[s], 4, KERN_COPY_H2D) == -EINVAL
                     ? 0
                     : -EPROTO;
        if (b == 5) snprintf(p->why, sizeof p->why, "%s", kern_stream_last_error());
        pthread_mutex_lock(&p->mu);
        if (rc < 0 && !p->rc) p->rc = rc;
        p->produced = b + 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

static void test_pipeline(struct kern_ctx *k3)
{
    struct pipe p;
    memset(&p, 0, sizeof p);
    p.k = k3;
    float *data = fill_random((size_t)BATCHES * N_BATCH);
    p.data = data;
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0; s++) {
        p.src[s] = malloc(N_BATCH * sizeof(float));
        rc = kern_mem_alloc(k3, N_BATCH * sizeof(float), (void **)&p.dev[s]);
        if (rc == 0) rc = kern_event_create(k3, &p.up[s]);
    }
    float *y = NULL, *ones = NULL;
    if (rc == 0) rc = kern_mem_alloc(k3, N_BATCH * sizeof(float), (void **)&y);
    if (rc == 0) rc = kern_mem_alloc(k3, N_BATCH * sizeof(float), (void **)&ones);
    if (!ok(rc == 0, "pipeline buffers and events")) return;
    for (int i = 0; i < N_BATCH; i++)
        ones[i] = 1.0f;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t th;
    const int started = pthread_create(&th, NULL, producer, &p) == 0;
    int exact = started;
    char mine[256]; /* this thread's text, which the producer's failure must not change */
    snprintf(mine, sizeof mine, "%s", kern_stream_last_error());
    for (int b = 0; started && b < BATCHES; b++) {
        const int s = b % 2;
        pthread_mutex_lock(&p.mu);
        while (p.produced <= b)
            pthread_cond_wait(&p.cv, &p.mu);
        pthread_mutex_unlock(&p.mu);
        /* The ops thread: the compute queue waits for the upload, then an op reads it. */
        rc = kern_event_wait(k3, KERN_QUEUE_COMPUTE, p.up[s]);
        if (rc == 0) rc = kern_ref_add_fwd(k3, y, p.dev[s], ones, N_BATCH);
        const float *want = data + (size_t)b * N_BATCH;
        for (int i = 0; rc == 0 && i < N_BATCH; i++)
            exact &= y[i] == want[i] + 1.0f;
        exact &= rc == 0;
        pthread_mutex_lock(&p.mu);
        p.consumed = b + 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    if (started) pthread_join(th, NULL);
    ok(exact && p.rc == 0,
       "%d batches uploaded on the copy queue by a second thread, each read by an op of a "
       "3-thread context after kern_event_wait: exactly the data (+1)",
       BATCHES);
    ok(strstr(p.why, "kern_mem_copy_on") && !strcmp(kern_stream_last_error(), mine),
       "the producer's failure is described to it (%s), not to the ops thread", p.why);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    for (int s = 0; s < 2; s++) {
        free(p.src[s]);
        kern_mem_free(k3, p.dev[s]);
        kern_event_destroy(p.up[s]);
    }
    kern_mem_free(k3, y);
    kern_mem_free(k3, ones);
    free(data);
}

int main(int argc, char **argv)
{
    kt_seed_from_args(argc, argv, 20240611);
    struct kern_ctx *k = NULL, *k3 = NULL;
    struct kern_ctx_opts o;
    kern_ctx_opts_default(&o);
    o.threads = 3;
    if (!ok(kern_ctx_create(NULL, &k) == 0 && kern_ctx_create(&o, &k3) == 0,
            "CPU contexts (1 and 3 threads)"))
        return tap_done();
    test_copies(k);
    test_events(k, k3);
    test_pipeline(k3);
    kern_ctx_destroy(k);
    kern_ctx_destroy(k3);
    return tap_done();
}
