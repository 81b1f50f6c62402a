/*
 * One RAM cache of decoded tiles per node, shared by its local ranks (train.py --cache ram with
 * several ranks; docs/sharing.md, "One RAM copy per node"). ultralytics keeps one cache per rank,
 * so 8 ranks hold 8 copies (ultralytics/ultralytics#22307); here one POSIX shared-memory segment
 * holds every tile once, at an offset every rank computes alike from the index (the slot sizes),
 * filled by whichever rank decodes a record first and read by all.
 *
 * Contract:
 * - Attaching: every local rank calls ram_shm_attach with the same key and slots. The first
 *   creates the segment (O_EXCL), reserves all of it (fallocate: a full /dev/shm fails here with
 *   -ENOSPC, never later with SIGBUS), writes the header and marks it ready; the others wait for
 *   that, then map it. The last of `ranks` to attach unlinks the name: the memory lives while a
 *   rank maps it and goes with the last, so a finished or killed job leaves nothing behind.
 * - Stale segments: a job killed before every rank attached leaves its name. Every attach first
 *   removes segments of this prefix whose creator (pid and start time, on this host) is gone.
 * - A slot is written once: a rank claims it (0 -> 1), copies the tile, publishes it (1 -> 2,
 *   release); readers take it only at 2 (acquire). A rank that finds a slot claimed decodes for
 *   itself. A tile larger than its slot, or whose polygons do not fit the shared pool, is marked
 *   3 and never cached.
 * - Threads: get and put from any thread of any rank.
 */
#ifndef TRN_RAM_SHM_H
#define TRN_RAM_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment.h"

struct ram_shm;

/* The segment's name for key (a "/ffyolo-ram-<hash>" shm name) into out[cap]. */
void ram_shm_name(const char *key, char *out, size_t cap);

/* Whether a segment for key exists on this node now (a rank of the job created it). */
bool ram_shm_exists(const char *key);

/*
 * Attaches to (or creates) the node's segment for key: n slots of slot_bytes[i] bytes (pixels
 * and labels of record i, as the index gives its tile), and a pool of pool_bytes for polygons.
 * ranks: how many local ranks attach (the last unlinks the name). wait_s: how long a rank waits
 * for the creator. Returns 0, or -ENOSPC (/dev/shm too small), -ETIMEDOUT (the creator never
 * finished), -EPROTO (a segment under this key with another layout), -errno; err says which.
 */
int ram_shm_attach(const char *key, uint32_t ranks, uint64_t n, const uint64_t *slot_bytes,
                   uint64_t pool_bytes, double wait_s, struct ram_shm **out, char *err,
                   size_t err_cap);

/* The cached tile of record idx into *t (pointers into the segment); false when not cached. */
bool ram_shm_get(const struct ram_shm *s, uint64_t idx, struct trn_aug_tile *t);

/* Caches tile t of record idx if its slot is free; *t then points at the shared copy (also when
 * another rank cached it first). Otherwise *t stays. */
void ram_shm_put(struct ram_shm *s, uint64_t idx, struct trn_aug_tile *t);

/* Bytes of the segment (one copy for the node), and whether this rank created it. */
uint64_t ram_shm_bytes(const struct ram_shm *s);
bool ram_shm_created(const struct ram_shm *s);

/* Unmaps (the memory goes with the last rank). Accepts NULL. */
void ram_shm_detach(struct ram_shm *s);

/* Removes this prefix's segments in /dev/shm whose creator on this host is gone. Returns how
 * many. */
int ram_shm_clean_stale(void);

#endif /* TRN_RAM_SHM_H */
