/*
 * pread backend: a fixed pool of threads, each taking one slot at a time and running its reads
 * to the end with pread(2) (the same plan/account state machine as io_uring). Used when io_uring
 * is unavailable or asked for.
 *
 * Workers touch only the slot they hold and immutable engine fields; everything that changes file
 * state (the switch to buffered reads after an O_DIRECT refusal) is handed back to the engine
 * thread in ffio_pool_reap. One mutex guards both queues: the lock is taken once per submit call
 * and once per worker hand-off, which is noise next to a read.
 */
#include "ffio_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct ffio_pool {
    pthread_mutex_t mu;     /* guards everything below but `threads` */
    pthread_cond_t work_cv; /* work queued, or stop */
    pthread_cond_t done_cv; /* a slot finished */
    uint32_t *work;         /* FIFO of slots to read, capacity qd */
    uint32_t work_head, work_count;
    uint32_t *fin; /* FIFO of slots the workers are done with, capacity qd */
    uint32_t fin_head, fin_count;
    uint32_t *tmp;      /* engine thread: slots moved out of fin, capacity qd */
    bool stop;          /* workers exit once the work queue is empty */
    pthread_t *threads; /* n_threads workers */
    unsigned n_threads;
    struct ffio_engine *e; /* owning engine (immutable parts read by workers) */
};

static enum ffio_step run_slot(const struct ffio_engine *e, struct ffio_slot *s)
{
    for (;;) {
        ssize_t r = pread(s->op.fd, s->op.buf, s->op.len, (off_t)s->op.off);
        if (r < 0) r = -errno;
        const enum ffio_step st = ffio_slot_account(e, s, r);
        if (st != FFIO_STEP_AGAIN) return st;
    }
}

static void *worker(void *arg)
{
    struct ffio_pool *const p = arg;
    const unsigned qd = p->e->qd;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->work_count && !p->stop)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (!p->work_count) break; /* stop */
        const uint32_t si = p->work[p->work_head];
        p->work_head = (p->work_head + 1) % qd;
        p->work_count--;
        pthread_mutex_unlock(&p->mu);

        struct ffio_slot *const s = &p->e->slots[si];
        s->step = run_slot(p->e, s);

        pthread_mutex_lock(&p->mu);
        p->fin[(p->fin_head + p->fin_count) % qd] = si;
        p->fin_count++;
        pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_free(struct ffio_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->tmp);
    free(p->fin);
    free(p->work);
    free(p);
}

int ffio_pool_create(struct ffio_engine *e)
{
    struct ffio_pool *const p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->e = e;
    unsigned n = e->opts.threads ? e->opts.threads : (e->qd < 8 ? e->qd : 8);
    if (n > e->qd) n = e->qd; /* more threads than slots would only sleep */
    p->work = calloc(e->qd, sizeof *p->work);
    p->fin = calloc(e->qd, sizeof *p->fin);
    p->tmp = calloc(e->qd, sizeof *p->tmp);
    p->threads = calloc(n, sizeof *p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (!p->work || !p->fin || !p->tmp || !p->threads) {
        pool_free(p);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        const int rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc != 0) {
            pool_free(p);
            return -rc;
        }
        p->n_threads++;
    }
    e->pool = p;
    e->stats.threads = n;
    return 0;
}

void ffio_pool_destroy(struct ffio_engine *e)
{
    pool_free(e->pool);
    e->pool = NULL;
}

static void enqueue_locked(struct ffio_pool *p, const uint32_t *si, size_t n)
{
    const unsigned qd = p->e->qd;
    for (size_t i = 0; i < n; i++) {
        p->work[(p->work_head + p->work_count) % qd] = si[i];
        p->work_count++;
    }
    if (n == 1)
        pthread_cond_signal(&p->work_cv);
    else
        pthread_cond_broadcast(&p->work_cv);
}

int ffio_pool_submit(struct ffio_engine *e, const uint32_t *si, size_t n)
{
    struct ffio_pool *const p = e->pool;
    pthread_mutex_lock(&p->mu);
    enqueue_locked(p, si, n);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int ffio_pool_reap(struct ffio_engine *e, bool block)
{
    struct ffio_pool *const p = e->pool;
    const unsigned qd = e->qd;
    pthread_mutex_lock(&p->mu);
    while (block && !p->fin_count)
        pthread_cond_wait(&p->done_cv, &p->mu);
    const uint32_t n = p->fin_count;
    for (uint32_t i = 0; i < n; i++)
        p->tmp[i] = p->fin[(p->fin_head + i) % qd];
    p->fin_head = (p->fin_head + n) % qd;
    p->fin_count = 0;
    pthread_mutex_unlock(&p->mu);

    size_t again = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t si = p->tmp[i];
        if (e->slots[si].step == FFIO_STEP_NEED_BUFFERED) {
            if (ffio_engine_switch_buffered(e, si) == 0) p->tmp[again++] = si;
        } else {
            ffio_engine_finish(e, si);
        }
    }
    if (again) ffio_pool_submit(e, p->tmp, again);
    return 0;
}
