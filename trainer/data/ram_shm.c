/*
 * The node's shared RAM cache of decoded tiles (ram_shm.h). Layout of the segment:
 *   [header, 4096 B][state: n x u32][desc: n x struct desc][slots: sum slot_bytes][pool]
 * Slot offsets are prefix sums of slot_bytes (16-byte aligned), computed by each rank; the
 * header's layout hash makes sure they agree.
 */
#include "ram_shm.h"

#include "ffr.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_PREFIX "ffyolo-ram-"
#define SHM_MAGIC  "ffyram1"

enum { SLOT_EMPTY = 0, SLOT_FILLING = 1, SLOT_READY = 2, SLOT_NEVER = 3 };

struct head {
    char magic[8];
    uint64_t layout, total, n, pool_bytes;
    int64_t creator_pid;
    uint64_t creator_start; /* /proc/PID/stat starttime: a reused pid is another process */
    char host[64];
    uint32_t ranks;
    _Atomic uint32_t ready, attached;
    _Atomic uint64_t pool_used;
};

struct desc {
    uint32_t w, h, n_labels, has_seg;
    uint64_t seg_off; /* in the pool */
};

struct ram_shm {
    uint8_t *base;
    uint64_t total, n;
    struct head *h;
    _Atomic uint32_t *state;
    struct desc *desc;
    uint64_t *slot_off; /* [n + 1], this rank's copy */
    uint8_t *slots, *pool;
    bool created;
};

void ram_shm_name(const char *key, char *out, size_t cap)
{
    snprintf(out, cap, "/" SHM_PREFIX "%016" PRIx64, ffr_hash(key, strlen(key)));
}

bool ram_shm_exists(const char *key)
{
    char name[64];
    ram_shm_name(key, name, sizeof name);
    const int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

/* Field 22 of /proc/pid/stat (start time in clock ticks since boot), or 0. */
static uint64_t proc_start(int64_t pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%" PRId64 "/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *s = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long v = 0;
    if (s && sscanf(s + 2,
                    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                    "%*d %llu",
                    &v) != 1)
        v = 0;
    return v;
}

static void this_host(char *h, size_t cap)
{
    if (gethostname(h, cap) != 0) snprintf(h, cap, "?");
    h[cap - 1] = '\0';
}

/* Whether the creator named in h (a header read from a segment) is gone. */
static bool creator_gone(const struct head *h)
{
    char host[64];
    this_host(host, sizeof host);
    if (strncmp(h->host, host, sizeof host) != 0) return false; /* not ours to judge */
    if (kill((pid_t)h->creator_pid, 0) != 0 && errno == ESRCH) return true;
    return proc_start(h->creator_pid) != h->creator_start;
}

int ram_shm_clean_stale(void)
{
    DIR *d = opendir("/dev/shm");
    int removed = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0) continue;
        char name[300];
        snprintf(name, sizeof name, "/%.250s", e->d_name);
        const int fd = shm_open(name, O_RDONLY, 0);
        if (fd < 0) continue;
        struct head h;
        const bool read_ok = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
        close(fd);
        /* a header not yet written is a creator at work, unless it is long dead: judged only
         * on a complete header */
        if (read_ok && !memcmp(h.magic, SHM_MAGIC, 8) && creator_gone(&h) && shm_unlink(name) == 0)
            removed++;
    }
    if (d) closedir(d);
    return removed;
}

static uint64_t layout_of(uint64_t n, const uint64_t *slot_off, uint64_t pool_bytes)
{
    const uint64_t head[2] = { n, pool_bytes };
    return ffr_hash(head, sizeof head) ^ ffr_hash(slot_off, (size_t)(n + 1) * sizeof *slot_off);
}

int ram_shm_attach(const char *key, uint32_t ranks, uint64_t n, const uint64_t *slot_bytes,
                   uint64_t pool_bytes, double wait_s, struct ram_shm **out, char *err,
                   size_t err_cap)
{
    *out = NULL;
    char name[64];
    ram_shm_name(key, name, sizeof name);
    struct ram_shm *s = calloc(1, sizeof *s);
    uint64_t *off = calloc((size_t)n + 1, sizeof *off);
    if (!s || !off) {
        free(s);
        free(off);
        return trn_fail(err, err_cap, -ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < n; i++)
        off[i + 1] = off[i] + ((slot_bytes[i] + 15) & ~(uint64_t)15);
    const uint64_t state_off = 4096, desc_off = (state_off + n * 4 + 63) & ~(uint64_t)63;
    const uint64_t slots_off = (desc_off + n * sizeof(struct desc) + 4095) & ~(uint64_t)4095;
    const uint64_t pool_off = slots_off + off[n];
    const uint64_t total = pool_off + pool_bytes, layout = layout_of(n, off, pool_bytes);
    s->slot_off = off;
    s->n = n;
    s->total = total;
    (void)ram_shm_clean_stale();

    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = 0;
    if (fd >= 0) {
        s->created = true;
        /* reserve it all now: a full /dev/shm says so here, not with SIGBUS mid-epoch */
        const int fr = posix_fallocate(fd, 0, (off_t)total);
        if (fr != 0) {
            rc = trn_fail(err, err_cap, -fr, "/dev/shm%s: reserving the shared RAM cache: %s", name,
                          strerror(fr));
            /* a size of 1 tells the ranks that opened it meanwhile not to wait */
            (void)!ftruncate(fd, 1);
            shm_unlink(name);
        }
    } else if (errno == EEXIST) {
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) rc = trn_fail(err, err_cap, -errno, "/dev/shm%s: %s", name, strerror(errno));
    } else {
        rc = trn_fail(err, err_cap, -errno, "/dev/shm%s: %s", name, strerror(errno));
    }
    /* the others wait for the creator's size and header */
    const struct timespec tick = { 0, 10 * 1000 * 1000 };
    struct stat st;
    for (double waited = 0; rc == 0 && !s->created; waited += 0.01) {
        if (fstat(fd, &st) != 0)
            rc = trn_fail(err, err_cap, -errno, "/dev/shm%s: %s", name, strerror(errno));
        else if ((uint64_t)st.st_size == total)
            break;
        else if (st.st_size == 1)
            rc = trn_fail(err, err_cap, -ENOSPC,
                          "/dev/shm%s: the rank that created it could not reserve it", name);
        else if (st.st_size > 0 && (uint64_t)st.st_size != total)
            rc = trn_fail(err, err_cap, -EPROTO,
                          "/dev/shm%s: a shared RAM cache of another size under this job's key",
                          name);
        else if (waited > wait_s)
            rc = trn_fail(err, err_cap, -ETIMEDOUT, "/dev/shm%s: its creator never sized it", name);
        else
            nanosleep(&tick, NULL);
    }
    if (rc == 0) {
        s->base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s->base == MAP_FAILED) {
            s->base = NULL;
            rc = trn_fail(err, err_cap, -errno, "/dev/shm%s: mmap: %s", name, strerror(errno));
        }
    }
    if (fd >= 0) close(fd);
    if (rc == 0) {
        s->h = (struct head *)(void *)s->base;
        s->state = (_Atomic uint32_t *)(void *)(s->base + state_off);
        s->desc = (struct desc *)(void *)(s->base + desc_off);
        s->slots = s->base + slots_off;
        s->pool = s->base + pool_off;
        if (s->created) {
            memcpy(s->h->magic, SHM_MAGIC, 8);
            s->h->layout = layout;
            s->h->total = total;
            s->h->n = n;
            s->h->pool_bytes = pool_bytes;
            s->h->creator_pid = getpid();
            s->h->creator_start = proc_start(getpid());
            this_host(s->h->host, sizeof s->h->host);
            s->h->ranks = ranks;
            atomic_store_explicit(&s->h->ready, 1, memory_order_release);
        } else {
            for (double waited = 0;
                 !atomic_load_explicit(&s->h->ready, memory_order_acquire) && rc == 0;
                 waited += 0.01) {
                if (waited > wait_s)
                    rc = trn_fail(err, err_cap, -ETIMEDOUT,
                                  "/dev/shm%s: its creator never finished its header", name);
                nanosleep(&tick, NULL);
            }
            if (rc == 0 && s->h->layout != layout)
                rc = trn_fail(err, err_cap, -EPROTO,
                              "/dev/shm%s: a shared RAM cache of another layout under this job's "
                              "key",
                              name);
        }
    }
    if (rc == 0 && atomic_fetch_add(&s->h->attached, 1) + 1 >= ranks) shm_unlink(name);
    if (rc < 0) {
        ram_shm_detach(s);
        return rc;
    }
    *out = s;
    return 0;
}

bool ram_shm_get(const struct ram_shm *s, uint64_t idx, struct trn_aug_tile *t)
{
    if (!s || idx >= s->n ||
        atomic_load_explicit(&s->state[idx], memory_order_acquire) != SLOT_READY)
        return false;
    const struct desc *d = &s->desc[idx];
    const uint8_t *slot = s->slots + s->slot_off[idx];
    const size_t lb = (size_t)d->n_labels * 5 * sizeof(float);
    const uint8_t *seg = d->has_seg ? s->pool + d->seg_off : NULL;
    *t = (struct trn_aug_tile){
        .pixels = slot + lb,
        .w = (int)d->w,
        .h = (int)d->h,
        .labels = (const float *)(const void *)slot,
        .n_labels = (int)d->n_labels,
        .seg_n = seg ? (const uint32_t *)(const void *)seg : NULL,
        .seg_xy = seg ? (const float *)(const void *)(seg + (size_t)d->n_labels * 4) : NULL,
    };
    return true;
}

void ram_shm_put(struct ram_shm *s, uint64_t idx, struct trn_aug_tile *t)
{
    if (!s || idx >= s->n) return;
    uint32_t empty = SLOT_EMPTY;
    if (!atomic_compare_exchange_strong_explicit(&s->state[idx], &empty, SLOT_FILLING,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        ram_shm_get(s, idx, t); /* cached by another rank: use that copy */
        return;
    }
    const size_t nl = (size_t)t->n_labels, lb = nl * 5 * sizeof(float);
    const size_t px = (size_t)t->w * (size_t)t->h * 3;
    size_t pts = 0;
    for (size_t i = 0; t->seg_n && i < nl; i++)
        pts += t->seg_n[i];
    const size_t sb = t->seg_n ? nl * 4 + pts * 2 * sizeof(float) : 0;
    uint64_t seg_off = 0;
    bool fits = lb + px <= s->slot_off[idx + 1] - s->slot_off[idx];
    if (fits && sb) {
        seg_off = atomic_fetch_add(&s->h->pool_used, (sb + 15) & ~(size_t)15);
        fits = seg_off + sb <= s->h->pool_bytes;
    }
    if (!fits) {
        atomic_store_explicit(&s->state[idx], SLOT_NEVER, memory_order_release);
        return;
    }
    uint8_t *slot = s->slots + s->slot_off[idx];
    memcpy(slot, t->labels, lb);
    memcpy(slot + lb, t->pixels, px);
    if (sb) {
        memcpy(s->pool + seg_off, t->seg_n, nl * 4);
        memcpy(s->pool + seg_off + nl * 4, t->seg_xy, pts * 2 * sizeof(float));
    }
    s->desc[idx] = (struct desc){ (uint32_t)t->w, (uint32_t)t->h, (uint32_t)nl, sb != 0, seg_off };
    atomic_store_explicit(&s->state[idx], SLOT_READY, memory_order_release);
    ram_shm_get(s, idx, t);
}

uint64_t ram_shm_bytes(const struct ram_shm *s)
{
    return s ? s->total : 0;
}

bool ram_shm_created(const struct ram_shm *s)
{
    return s && s->created;
}

void ram_shm_detach(struct ram_shm *s)
{
    if (!s) return;
    if (s->base) munmap(s->base, (size_t)s->total);
    free(s->slot_off);
    free(s);
}
