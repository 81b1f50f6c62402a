/*
 * ckpt: our checkpoint file (docs/checkpoint.md), read and written. The training loop
 * (train/train.c) decides what goes in it and how a run resumes from it; this module owns the
 * bytes: the record list, the metadata mapping, and loading a checkpoint's EMA weights into a
 * model for inference (weights.c, validation of best.ckpt).
 *
 * FORMAT. One ffr file (ffr.h: written to a temporary, fsynced, renamed into place; every record
 * checksummed; an index), raw codec, little-endian. Each record's summary is its name (ASCII, no
 * NUL), in the order of enum trn_ckpt_rec. The index metadata is a YAML mapping with
 * `format: ffyolo-ckpt-1` and scalars (and a `names` list, which this reader skips); writers put
 * what train.h lists there.
 *
 * Errors are negative: errno values, ffr codes (ffr_strerror), -TRN_CKPT_EBAD (a checkpoint that
 * does not parse or does not fit the model; the err text says which record). Every call that
 * takes err/err_cap writes a line naming the file there on failure. Nothing is printed.
 */
#ifndef TRN_CKPT_H
#define TRN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ffr.h"
#include "model.h"

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format tag in the metadata. */
#define TRN_CKPT_FORMAT "ffyolo-ckpt-1"

/* Records, in file order. */
enum trn_ckpt_rec {
    TRN_CKPT_MODEL_PARAM,  /* float32[arena_len[PARAM]]  the model's parameters */
    TRN_CKPT_MODEL_BUFFER, /* float32[arena_len[BUFFER]] BN running mean/var, Detect anchors */
    TRN_CKPT_MODEL_COUNT,  /* int64[arena_len[COUNT]]    BN num_batches_tracked */
    TRN_CKPT_EMA_PARAM,    /* float32[arena_len[PARAM]]  the EMA's parameters */
    TRN_CKPT_EMA_BUFFER,   /* float32[arena_len[BUFFER]] the EMA's buffers */
    TRN_CKPT_OPT0,         /* float32[arena_len[PARAM]]  SGD momentum / Adam exp_avg */
    TRN_CKPT_OPT1,         /* float32[arena_len[PARAM]]  Adam exp_avg_sq (0 bytes for SGD) */
    TRN_CKPT_GRAD,         /* float32[arena_len[PARAM]]  gradients accumulated since the step */
    TRN_CKPT_MODEL_YAML,   /* text: the model yaml the run was built from */
    TRN_CKPT_HYP_YAML,     /* text: hyperparameters (trn_hyp_parse reads it) */
    TRN_CKPT_OPT_YAML,     /* text: the run's options, as opt.yaml */
    TRN_CKPT_N_RECORDS
};

/* Record k's name ("model.param", ...); NULL when k is out of range. */
const char *trn_ckpt_record_name(int k);

/* The largest text record read back (model, hyp and opt yaml). */
#define TRN_CKPT_MAX_TEXT (1u << 20)

/* One record to write: bytes at p (NULL only when bytes is 0). */
struct trn_ckpt_src {
    const void *p;
    size_t bytes;
};

/*
 * Write a checkpoint: rec[k] as record k, meta (mlen bytes, the YAML mapping, which must start
 * with the format line) as the index metadata. The previous file at path stays intact on any
 * failure. Returns 0 or a negative ffr/errno code.
 */
int trn_ckpt_write(const char *path, const struct trn_ckpt_src rec[TRN_CKPT_N_RECORDS],
                   const char *meta, size_t mlen, char *err, size_t err_cap);

/* An open checkpoint (opaque). */
struct trn_ckpt;

/* True when reader r's metadata says it is a checkpoint of this format (a cheap probe that
 * tells our files from other ffr files). */
bool trn_ckpt_probe(const struct ffr_reader *r);

/*
 * Open path: its metadata must carry the format tag and every record must be present (else
 * -TRN_CKPT_EBAD). ffr's errors (missing file, bad magic, ...) come back as they are.
 */
int trn_ckpt_open(const char *path, struct trn_ckpt **out, char *err, size_t err_cap);

/* As trn_ckpt_open on a reader opened by the caller; takes r (closed on failure too). path
 * names the file in messages. */
int trn_ckpt_adopt(struct ffr_reader *r, const char *path, struct trn_ckpt **out, char *err,
                   size_t err_cap);

/* Close; NULL is a no-op. */
void trn_ckpt_close(struct trn_ckpt *c);

/* The raw metadata text (len bytes, not NUL-terminated), valid until close. */
const char *trn_ckpt_metadata(const struct trn_ckpt *c, size_t *len);

/* Metadata scalar `key` as text (valid until close), or NULL when absent. */
const char *trn_ckpt_get(const struct trn_ckpt *c, const char *key);

/* Metadata scalar `key` as an integer in [lo, hi] / a finite double. -TRN_CKPT_EBAD when absent
 * or out of range. */
int trn_ckpt_i64(const struct trn_ckpt *c, const char *key, int64_t lo, int64_t hi, int64_t *out);
int trn_ckpt_f64(const struct trn_ckpt *c, const char *key, double *out);

/* Record k's position in the file (for messages). */
int64_t trn_ckpt_record_index(const struct trn_ckpt *c, int k);

/* Read record k into dst, which must be exactly `bytes` long (-TRN_CKPT_EBAD when the record's
 * size differs: a checkpoint of another model). */
int trn_ckpt_read(const struct trn_ckpt *c, int k, void *dst, size_t bytes, char *err,
                  size_t err_cap);

/* Text record k as a malloc'd NUL-terminated string (at most TRN_CKPT_MAX_TEXT); NULL with *rc
 * the reason. */
char *trn_ckpt_text(const struct trn_ckpt *c, int k, size_t *len, int *rc);

/* Load the EMA's parameters and buffers (the weights ultralytics saves as `model`) into m, and
 * with counts the BN batch counters too. */
int trn_ckpt_load_ema(const struct trn_ckpt *c, struct trn_model *m, bool counts, char *err,
                      size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
