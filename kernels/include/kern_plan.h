/*
 * kern_plan: which cuDNN algorithm each convolution pass runs, chosen so that a run repeats
 * itself bit for bit, and written down so that every later run takes the same ones.
 *
 * WHY. Two processes that time cuDNN's algorithms (cudnnFind*) can pick different ones for the
 * same shape, even among the deterministic ones: the timings are noisy, and two deterministic
 * algorithms still sum in different orders, so the losses of two runs drift apart (seen on an
 * H200: 15.8752 and 15.8665 after 13 steps). So the default choice is made without timing:
 * cuDNN's heuristics (cudnnGet*_v7) rank the algorithms from the shape alone; the first that is
 * deterministic, fits the workspace cap and computes in the wanted math is taken. It depends only
 * on the KEY below: the same GPU model, cuDNN and shape give the same algorithm in every process.
 *
 * TUNING. A timed choice (the fastest deterministic algorithm by cudnnFind*, yolo-train
 * --cudnn-tune) is made once and written to a plan file; later runs read it and never time. A
 * file may hold entries of several GPUs and cuDNN versions: an entry is used only where its
 * whole key matches, and an entry that does not fit (an algorithm this cuDNN refuses for the
 * shape, a workspace over the cap, a non-deterministic entry in a deterministic run) falls back
 * to the heuristics, as a missing one does.
 *
 * THE KEY. GPU name (spaces as '_'), SM count, cuDNN version (cudnnGetVersion), the pass
 * (forward, backward data, backward filter), the shape (struct kern_conv2d; x_nstride 0 when
 * dense), the data type and the layout. THE VALUE. The algorithm and math type (cuDNN's enum
 * values), whether cuDNN reports it deterministic, and where it came from (heuristics, a tuning
 * run). Later: an engine and its knobs, for the graph API.
 *
 * THE FILE (text, one entry a line, so that tuned files for H100 and H200 can be committed and
 * read in a diff):
 *     # kern conv plans 1
 *     # gpu sms cudnn op n c_in h w c_out k_h k_w s_h s_w p_h p_w x_nstride dtype layout algo
 *     #   math det src
 *     NVIDIA_H200 132 91300 fwd 64 3 640 640 16 6 6 2 2 2 2 0 bf16 nhwc 1 1 1 heur
 * The first line is the magic and version; other lines starting with '#' and blank lines are
 * skipped. op: fwd, data, filter; dtype: f32, bf16, f16; layout: nchw, nhwc; det: 0 or 1;
 * src: heur or tuned. Bounds: KERN_PLAN_MAX_BYTES per file, KERN_PLAN_MAX_LINE per line,
 * KERN_PLAN_MAX_ENTRIES entries; shapes as kern_conv2d's contract (every field >= its minimum and
 * a positive output), algorithms 0..63, math 0..15. A bad file is refused whole, with the file
 * name and line in the error text; a key given twice is an error. Saved files are sorted, so
 * equal tables give equal files.
 *
 * THE HASH. kern_plan_hash digests the entries a run used (got or put), each as its line without
 * src, sorted: two runs with the same hash ran the same algorithms, whichever way they chose
 * them. yolo-train records it in --bench --json and in the checkpoint.
 *
 * THREADS. A table has a mutex: contexts on different devices may share one. Errors: negative
 * errno; text (file, line, why) in the caller's err buffer. Never prints.
 */
#ifndef KERN_PLAN_H
#define KERN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The three passes of a convolution. */
enum { KERN_PLAN_FWD = 0, KERN_PLAN_DATA = 1, KERN_PLAN_FILTER = 2 };
/* Where an entry came from: cuDNN's heuristics, or a timed search (--cudnn-tune). */
enum { KERN_PLAN_SRC_HEUR = 0, KERN_PLAN_SRC_TUNED = 1 };
/* How kern_plan_choose chose: the table, the heuristics, a timed search. */
enum { KERN_PLAN_HOW_TABLE = 0, KERN_PLAN_HOW_HEUR = 1, KERN_PLAN_HOW_FIND = 2 };

#define KERN_PLAN_GPU_LEN     64                /* the GPU name, '\0' included */
#define KERN_PLAN_MAX_BYTES   (4u << 20)        /* a plan file larger than this is refused */
#define KERN_PLAN_MAX_LINE    512               /* a longer line is refused */
#define KERN_PLAN_MAX_ENTRIES 65536             /* a table never holds more */
#define KERN_PLAN_MAX_CANDS   32                /* candidates a backend reports per pass */
#define KERN_PLAN_WS_CAP      ((size_t)1 << 30) /* the workspace one pass may take (CUDA) */

struct kern_plan_key {
    char gpu[KERN_PLAN_GPU_LEN]; /* device name as kern_plan_gpu_name writes it */
    int sms;                     /* multiprocessors, >= 1 */
    int cudnn;                   /* cudnnGetVersion(), >= 1 */
    int op;                      /* KERN_PLAN_FWD, _DATA, _FILTER */
    struct kern_conv2d d;        /* the shape; x_nstride 0 when dense (equal keys compare equal) */
    int dtype;                   /* KERN_DT_* */
    int layout;                  /* KERN_LAYOUT_* */
};

struct kern_plan_val {
    int algo; /* cuDNN's algorithm enum value of the pass, 0..63 */
    int math; /* cudnnMathType_t value, 0..15 */
    int det;  /* 1: cuDNN reports it deterministic */
    int src;  /* KERN_PLAN_SRC_* */
};

/* One algorithm as cuDNN reports it, in cuDNN's order (heuristics: rank; Find: time). */
struct kern_plan_cand {
    int algo, math;
    int det;       /* 1: deterministic */
    int ok;        /* 1: cuDNN can run it here (status success) */
    int math_ok;   /* 1: its math is what the data type asks for (float32: no TF32) */
    size_t memory; /* workspace bytes */
    float ms;      /* Find: measured time; heuristics: -1 */
};

struct kern_plan;

/* A new empty table into *out. Returns 0 or -EINVAL, -ENOMEM. */
KERN_API int kern_plan_create(struct kern_plan **out);
/* Frees t (NULL ok). */
KERN_API void kern_plan_destroy(struct kern_plan *t);

/* Entries held, used or not. */
KERN_API int kern_plan_count(struct kern_plan *t);

/* The value of key k into *v, and marks the entry used. Returns 0, -ENOENT, -EINVAL. */
KERN_API int kern_plan_get(struct kern_plan *t, const struct kern_plan_key *k,
                           struct kern_plan_val *v);

/* Sets k's value (replacing any), marked used. Returns 0, -EINVAL (a key or value outside the
 * bounds above), -E2BIG (KERN_PLAN_MAX_ENTRIES), -ENOMEM. */
KERN_API int kern_plan_put(struct kern_plan *t, const struct kern_plan_key *k,
                           const struct kern_plan_val *v);

/* Adds the entries of text (the file format above) to t, unused; name is the file's name for
 * the errors. All or nothing: on error t is unchanged. Returns the entries added, or -EINVAL
 * (a bad line: err says "NAME:LINE: why"), -EFBIG, -E2BIG, -EEXIST (a key given twice), -ENOMEM. */
KERN_API int kern_plan_parse(struct kern_plan *t, const char *text, size_t len, const char *name,
                             char *err, size_t err_cap);

/* kern_plan_parse of a file: a regular file (a FIFO, a directory or a device is refused without
 * blocking: -EINVAL), at most KERN_PLAN_MAX_BYTES (-EFBIG). -ENOENT when it does not exist. */
KERN_API int kern_plan_load(struct kern_plan *t, const char *path, char *err, size_t err_cap);

/* The file text of t's entries (used_only: those used) into dst, sorted. Returns the bytes the
 * whole text takes ('\0' excluded), as snprintf: written whole only when it is < dst_cap. */
KERN_API int kern_plan_format(struct kern_plan *t, int used_only, char *dst, size_t dst_cap);

/* Writes kern_plan_format's text to path through a temporary beside it and a rename, so that a
 * killed or concurrent writer leaves the old file or the new one, never a part. Returns 0 or a
 * negative errno (err says which call failed on which path). */
KERN_API int kern_plan_save(struct kern_plan *t, const char *path, int used_only, char *err,
                            size_t err_cap);

/* The digest of the used entries (see THE HASH); 0 when none is used. */
KERN_API uint64_t kern_plan_hash(struct kern_plan *t);

/* The candidate to take from c[0..n) in cuDNN's order: the first that can run, computes in the
 * wanted math, needs at most ws_cap bytes and is deterministic; with any_algo, or when none is
 * deterministic, the first that passes the other rules. Returns its index or -1. */
KERN_API int kern_plan_pick(const struct kern_plan_cand *c, int n, int any_algo, size_t ws_cap);

/* What a backend gives kern_plan_choose. Each returns >= 0 or a negative errno. */
struct kern_plan_backend {
    void *arg;
    /* Whether v can run on this shape: 0 and *ws its workspace bytes, else < 0. */
    int (*check)(void *arg, int op, const struct kern_plan_val *v, size_t *ws);
    /* Heuristics (heur) or a timed search (find): up to cap candidates into c, in cuDNN's
     * order; returns how many. */
    int (*heur)(void *arg, int op, struct kern_plan_cand *c, int cap);
    int (*find)(void *arg, int op, struct kern_plan_cand *c, int cap);
};

/*
 * The algorithm of pass k->op: t's entry when it has one that fits (check succeeds within ws_cap
 * and, unless any_algo, it is deterministic); else, with tune, the fastest by b->find; else the
 * first of b->heur by kern_plan_pick (b->find when the heuristics offer nothing that fits). A
 * pick is confirmed by b->check, whose workspace size is used; one it refuses is passed over. What
 * was chosen is put into t (unless t is NULL), so that t then holds every pass the run planned.
 * *v gets the value, *ws its workspace, *how KERN_PLAN_HOW_*. Returns 0, -ENOTSUP (nothing fits),
 * or the backend's error.
 */
KERN_API int kern_plan_choose(struct kern_plan *t, const struct kern_plan_key *k, int any_algo,
                              int tune, size_t ws_cap, const struct kern_plan_backend *b,
                              struct kern_plan_val *v, size_t *ws, int *how);

/* dst (KERN_PLAN_GPU_LEN bytes) = name with every byte outside [A-Za-z0-9._-] as '_', cut to
 * fit: the form the key and the file use. */
KERN_API void kern_plan_gpu_name(char *dst, const char *name);

/* "fwd", "data", "filter" for KERN_PLAN_*; "?" otherwise. */
KERN_API const char *kern_plan_op_name(int op);

#ifdef __cplusplus
}
#endif

#endif
