/*
 * Reading PyTorch / ultralytics `.pt` checkpoints without Python and without executing anything.
 *
 * FORMAT. A .pt file (torch.save, zip serialization, torch >= 1.6) is a zip archive whose entries
 * share one top folder "<prefix>/": data.pkl (a pickle, protocol 2 in practice), data/<key> (the
 * raw little-endian bytes of each storage), version, and sometimes byteorder. Entries are usually
 * STORED; DEFLATE is accepted too (zlib). Every entry used is checked against its CRC-32.
 *
 * THE PICKLE is run by a small stack machine that only BUILDS DATA. GLOBAL/STACK_GLOBAL make an
 * inert (module, name) reference; REDUCE/NEWOBJ/BUILD on it make an inert placeholder object
 * (callable + args + state) and nothing is ever called, imported or looked up outside this file.
 * A few callables are recognised and turned into plain data: collections.OrderedDict() (a dict),
 * torch._utils._rebuild_tensor_v2 / _rebuild_parameter(_with_state) and
 * torch._tensor._rebuild_from_type_v2 (tensor views), persistent ids ('storage', torch.XStorage,
 * key, location, numel) (storages in data/<key>). Limits (TRN_PT_MAX_*) bound memory and time;
 * a malformed or hostile file gives an error naming the file and the zip entry or pickle offset.
 *
 * STATE DICT. A module placeholder (the BUILD state of an nn.Module holds _parameters, _buffers,
 * _non_persistent_buffers_set and _modules) is walked as nn.Module.state_dict() does: its
 * parameters, then its persistent buffers, then each child with "<child>." prepended; None
 * entries are skipped. Names come out exactly as PyTorch writes them ("model.0.conv.weight",
 * "model.24.anchors").
 *
 * ERRORS. Functions returning int give >= 0 on success and a negative code on failure: -errno
 * (-ENOENT, -EIO, -ENOMEM, -EINVAL for bad arguments, -EFBIG) or -TRN_PT_E* below, named by
 * trn_strerror(). Where a function takes (err, err_cap), a failure also writes a one-line
 * message there: "yolov5n.pt: archive/data.pkl: offset 1234: unknown pickle opcode 0x69". The
 * library never prints and never exits.
 *
 * THREADS. A struct trn_pt may be used by one thread at a time; distinct ones are independent.
 */
#ifndef TRN_PTLOAD_H
#define TRN_PTLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (TRN_PT_E*, returned negated) are in errors.h, named by trn_strerror. */

/* Limits against hostile input. */
#define TRN_PT_MAX_FILE    (8ll << 30)  /* bytes of the .pt file */
#define TRN_PT_MAX_ENTRIES 65536        /* zip entries */
#define TRN_PT_MAX_PICKLE  (256u << 20) /* bytes of data.pkl */
#define TRN_PT_MAX_OBJECTS (1u << 22)   /* objects the pickle may create */
#define TRN_PT_MAX_MEMO    (1u << 22)   /* memo slots */
#define TRN_PT_MAX_STACK   (1u << 20)   /* stack entries */
#define TRN_PT_MAX_MARKS   4096         /* nested MARKs */
#define TRN_PT_MAX_STRING  (16u << 20)  /* bytes of one string */
#define TRN_PT_MAX_DEPTH   64           /* nesting of modules / dicts walked */
#define TRN_PT_MAX_DIMS    8            /* tensor dimensions */
#define TRN_PT_MAX_NAME    256          /* bytes of a state-dict name, NUL included */
/* Bytes the DEFLATE entries of one archive may inflate to, in all, held or streamed through,
 * unless trn_pt_set_inflate_budget says otherwise. torch.save stores its entries (no DEFLATE),
 * so this only bounds rewritten files: a deflate bomb (a 2^28-float storage of zeros in 1 MB)
 * is refused at it. */
#define TRN_PT_INFLATE_BUDGET (192ull << 20)

/* Element types of storages. */
enum trn_pt_dtype {
    TRN_PT_F16,
    TRN_PT_BF16,
    TRN_PT_F32,
    TRN_PT_F64,
    TRN_PT_I64,
    TRN_PT_I32,
    TRN_PT_I16,
    TRN_PT_I8,
    TRN_PT_U8,
    TRN_PT_BOOL,
};

/* One state-dict entry: a strided view of a storage. */
struct trn_pt_tensor {
    const char *name;                /* state-dict key, NUL-terminated */
    enum trn_pt_dtype dtype;         /* of the storage */
    int ndim;                        /* 0 .. TRN_PT_MAX_DIMS */
    int64_t shape[TRN_PT_MAX_DIMS];  /* dims, PyTorch order */
    int64_t stride[TRN_PT_MAX_DIMS]; /* in elements */
    int64_t offset;                  /* storage_offset, in elements */
    int64_t numel;                   /* product of shape (1 for ndim 0) */
    const char *storage_key;         /* data/<key> in the archive */
    int64_t storage_numel;           /* elements of the whole storage */
    bool parameter;                  /* from _parameters (trainable) rather than _buffers */
    bool contiguous;                 /* row-major dense strides */
};

/* An open checkpoint: the archive, the pickle's object tree, the last state dict built. */
struct trn_pt;

/*
 * Open a .pt file: read it (at most TRN_PT_MAX_FILE bytes), parse the zip directory, check and
 * run data.pkl. out: on success a new handle (free with trn_pt_close); untouched on error.
 * Returns 0, -errno of open/read, -EFBIG, -TRN_PT_EZIP, -TRN_PT_ECRC, -TRN_PT_EPICKLE,
 * -TRN_PT_ELIMIT, -TRN_PT_EUNSUPPORTED, -ENOMEM, -EINVAL (NULL arguments).
 */
int trn_pt_open(const char *path, struct trn_pt **out, char *err, size_t err_cap);

/* As trn_pt_open on bytes in memory; data is copied. name is used in messages. */
int trn_pt_open_mem(const void *data, size_t len, const char *name, struct trn_pt **out, char *err,
                    size_t err_cap);

/* Free a handle; NULL is allowed. Every pointer obtained from it becomes invalid. */
void trn_pt_close(struct trn_pt *pt);

/*
 * Keys of the top-level dict (the checkpoint's "epoch", "model", "ema", ...), with a short
 * description of each value ("None", "int -1", "str", "models.yolo.Model", "dict(8)",
 * "tensor"). i: 0-based. key/desc: out, valid until trn_pt_close. Returns the number of keys
 * (so i >= count means none; call with i = 0 to learn it), -TRN_PT_ESTRUCT when the pickle's
 * value is not a dict.
 */
int trn_pt_top_key(const struct trn_pt *pt, int i, const char **key, const char **desc);

/*
 * Build the flat state dict of one value of the checkpoint.
 * which: a top-level key ("model", "ema"); NULL picks as ultralytics' attempt_load does: "ema"
 * if present and not None, else "model"; "" means the top-level object itself (a plain state
 * dict saved with torch.save(model.state_dict())). The value may be a module placeholder
 * (walked as state_dict() does) or a dict of tensors (nested dicts give "a.b" names).
 * out: the tensors in state_dict() order, owned by pt, valid until the next trn_pt_state_dict
 * call or trn_pt_close. Returns the count, -TRN_PT_ESTRUCT (no such key, None, not a module or
 * dict, a value that is neither tensor nor module), -TRN_PT_ELIMIT (too deep, name too long),
 * -ENOMEM. No storage bytes are read here: each is CRC-checked when a view of it is first read
 * (trn_pt_storage, trn_pt_tensor_read_*), and a DEFLATE storage is inflated then, only as far as
 * the view reaches, within the archive's inflate budget.
 */
int trn_pt_state_dict(struct trn_pt *pt, const char *which, const struct trn_pt_tensor **out,
                      char *err, size_t err_cap);

/* The key trn_pt_state_dict(pt, NULL, ...) picks: "ema" when present and not None, else
 * "model" when present, else "" (the top level itself: a plain state dict); NULL if the top
 * level is not a dict. */
const char *trn_pt_default_key(const struct trn_pt *pt);

/* The raw bytes of a tensor's storage (little-endian) as far as its view reaches (all
 * storage_numel elements for a STORED entry), CRC-checked, valid until trn_pt_close; NULL if t
 * does not come from pt's last state dict, or the storage fails its CRC, does not inflate, or
 * passes the inflate budget. */
const void *trn_pt_storage(const struct trn_pt *pt, const struct trn_pt_tensor *t);
/* As trn_pt_storage, with the reason: 0, -EINVAL (t not from pt's last state dict),
 * -TRN_PT_ECRC, -TRN_PT_EZIP, -TRN_PT_ELIMIT (the inflate budget) or -ENOMEM. */
int trn_pt_tensor_check(const struct trn_pt *pt, const struct trn_pt_tensor *t);

/* The bytes this archive's DEFLATE entries may inflate to, in all (default
 * TRN_PT_INFLATE_BUDGET). A caller that knows the model sets it from the model's size. */
void trn_pt_set_inflate_budget(struct trn_pt *pt, uint64_t bytes);

/*
 * Copy a tensor's elements in row-major order, converted to float (fp16/bf16 exactly; fp64 and
 * integers rounded to nearest), honouring stride and offset. dst_len: elements of dst, at least
 * t->numel. Returns t->numel, -EINVAL (dst too small, t not from pt's last state dict), or the
 * storage's first-read error: -TRN_PT_ECRC, -TRN_PT_EZIP, -TRN_PT_ELIMIT (the inflate budget),
 * -ENOMEM.
 */
int64_t trn_pt_tensor_read_f32(const struct trn_pt *pt, const struct trn_pt_tensor *t, float *dst,
                               size_t dst_len);

/* As trn_pt_tensor_read_f32 into int64 (integer and bool dtypes only; else -TRN_PT_EUNSUPPORTED).
 */
int64_t trn_pt_tensor_read_i64(const struct trn_pt *pt, const struct trn_pt_tensor *t, int64_t *dst,
                               size_t dst_len);

/*
 * The model yaml an ultralytics Model placeholder carries in its `yaml` attribute, written as
 * flow-style YAML that trn_model_parse accepts ("{nc: 80, depth_multiple: 0.33, ...}").
 * which: as for trn_pt_state_dict. dst/dst_cap: out, NUL-terminated, truncated to fit.
 * Returns the full length (like snprintf), -TRN_PT_ESTRUCT (no module or no yaml dict),
 * -TRN_PT_ELIMIT (nested too deep).
 */
int trn_pt_model_yaml(const struct trn_pt *pt, const char *which, char *dst, size_t dst_cap);

/* An integer or string attribute of the module placeholder under `which` ("nc", "yaml_file").
 * Returns 0, -TRN_PT_ESTRUCT (no module, no such attribute, wrong type). *str is owned by pt. */
int trn_pt_model_attr_int(const struct trn_pt *pt, const char *which, const char *attr,
                          int64_t *out);
int trn_pt_model_attr_str(const struct trn_pt *pt, const char *which, const char *attr,
                          const char **out);

/* fp16 bits to float, exactly (subnormals, inf and NaN included). */
float trn_pt_half_to_float(uint16_t h);

/* Bytes per element of a dtype; its PyTorch storage name ("HalfStorage") and short name
 * ("f16"). */
size_t trn_pt_dtype_size(enum trn_pt_dtype d);
const char *trn_pt_dtype_name(enum trn_pt_dtype d);

/* ---------------------------------------------------------------------------------------- */
/* Mapping onto our model (trainer/model/model.h)                                                 */

struct trn_model;

/* How a checkpoint's state dict lines up with a model's tensors. */
struct trn_pt_match {
    int n_ckpt;              /* tensors in the checkpoint's state dict */
    int n_model;             /* tensors of the model */
    int n_matched;           /* same name, same shape */
    int n_shape;             /* same name, another shape */
    int n_unexpected;        /* in the checkpoint, not in the model */
    int n_missing;           /* in the model, not in the checkpoint */
    int64_t ckpt_params;     /* elements of the checkpoint's parameters (_parameters) */
    int64_t model_params;    /* the model's trainable parameters (info->n_params) */
    char first_problem[200]; /* the first mismatch, "" if none */
};

/*
 * Compare the state dict under `which` (see trn_pt_state_dict) with the model's tensors by
 * name and shape (an ndim-0 checkpoint tensor matches the model's ndim-0 num_batches_tracked).
 * match: out, filled whenever the state dict could be built. Returns 0 when every tensor maps
 * both ways with the same shape, -TRN_PT_EMISMATCH otherwise (err names the first problem),
 * or the errors of trn_pt_state_dict. Rebuilds pt's state dict (invalidates earlier views).
 */
int trn_pt_match_model(struct trn_pt *pt, const char *which, const struct trn_model *m,
                       struct trn_pt_match *match, char *err, size_t err_cap);

/*
 * Check as trn_pt_match_model, then copy every tensor into the model's arenas
 * (trn_model_arena): floats converted to fp32 (fp16 exactly), num_batches_tracked as int64.
 * Nothing is written unless everything matches. Returns 0 or the errors above.
 */
int trn_pt_copy_into_model(struct trn_pt *pt, const char *which, struct trn_model *m,
                           struct trn_pt_match *match, char *err, size_t err_cap);

/*
 * Open path, copy `which` (NULL: ema if present, else model) into m, close: the one call the
 * trainer and the validator need for `--weights yolov5n.pt`. Returns 0 or the errors of
 * trn_pt_open and trn_pt_copy_into_model.
 */
int trn_pt_load_into_model(const char *path, const char *which, struct trn_model *m, char *err,
                           size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif
