/*
 * hyp: YOLOv5 hyperparameters, read from an ultralytics hyp yaml (data/hyps/hyp.*.yaml) with
 * libyaml.
 *
 * The file is a top-level mapping of key: number. Every key of struct trn_hyp is recognised
 * (anchors is optional, as ultralytics keeps it commented out). A key the struct does not know
 * is reported through the note callback and ignored (whatever its value: ultralytics' own files
 * once carried an `albumentations:` list). A key the file lacks keeps its scratch-low default
 * (datasets/hyps/hyp.scratch-low.yaml) and is reported the same way. A value that is not a
 * finite number, or lies outside the key's range (see trn_hyp_check), a duplicated key, or a
 * document that is not a mapping is an error naming the file and line.
 */
#ifndef TRN_HYP_H
#define TRN_HYP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* YOLOv5 hyperparameters (ultralytics' key names; scratch-low defaults in brackets). */
struct trn_hyp {
    double lr0;             /* initial learning rate, (0, 1] [0.01] */
    double lrf;             /* final OneCycle/linear lr as a fraction of lr0, (0, 1] [0.01] */
    double momentum;        /* SGD momentum / Adam beta1, [0, 1) [0.937] */
    double weight_decay;    /* optimizer weight decay, [0, 1) [0.0005] */
    double warmup_epochs;   /* warmup epochs (fractions allowed), [0, 1000] [3.0] */
    double warmup_momentum; /* initial warmup momentum, [0, 1) [0.8] */
    double warmup_bias_lr;  /* initial warmup bias lr, [0, 1] [0.1] */
    double box;             /* box loss gain, [0, 1000] [0.05] */
    double cls;             /* cls loss gain, [0, 1000] [0.5] */
    double cls_pw;          /* cls BCE positive weight, (0, 1000] [1.0] */
    double obj;             /* obj loss gain, [0, 1000] [1.0] */
    double obj_pw;          /* obj BCE positive weight, (0, 1000] [1.0] */
    double iou_t;           /* IoU training threshold, [0, 1] [0.20] */
    double anchor_t;        /* anchor-multiple threshold, [1, 100] [4.0] */
    double anchors;         /* anchors per output layer, 0 = from the model; whole number
                               in [0, 100] [0] */
    double fl_gamma;        /* focal loss gamma, 0 = plain BCE, [0, 100] [0.0] */
    double hsv_h;           /* HSV hue gain (fraction), [0, 1] [0.015] */
    double hsv_s;           /* HSV saturation gain (fraction), [0, 1] [0.7] */
    double hsv_v;           /* HSV value gain (fraction), [0, 1] [0.4] */
    double degrees;         /* rotation, +/- degrees, [0, 180] [0.0] */
    double translate;       /* translation, +/- fraction of the image, [0, 1] [0.1] */
    double scale;           /* scale gain, +/- (scale factor in [1 - s, 1 + s]), [0, 1) [0.5] */
    double shear;           /* shear, +/- degrees, [0, 89] [0.0] */
    double perspective;     /* perspective, +/- fraction, [0, 0.01] [0.0] */
    double flipud;          /* probability of an up-down flip, [0, 1] [0.0] */
    double fliplr;          /* probability of a left-right flip, [0, 1] [0.5] */
    double mosaic;          /* probability of a 4-image mosaic, [0, 1] [1.0] */
    double mixup;           /* probability of mixup, [0, 1] [0.0] */
    double copy_paste;      /* probability of segment copy-paste, [0, 1] [0.0] */
};

/*
 * A note from the parser (unknown key, defaulted key), one line with no newline, naming the
 * file and line, e.g. "hyp.yaml:12: unknown key 'foo' ignored". ctx: as passed to the parser.
 * msg is valid only during the call.
 */
typedef void (*trn_hyp_note_fn)(void *ctx, const char *msg);

/* Fill *h with ultralytics' hyp.scratch-low.yaml values. h: out. Thread-safe. */
void trn_hyp_default(struct trn_hyp *h);

/*
 * Check every field against the range in struct trn_hyp. Returns 0, or -EINVAL and writes
 * "KEY: VALUE is outside [LO, HI]" (or "is not finite") to err (may be NULL; err_cap bytes,
 * NUL-terminated) for the first bad field. Thread-safe.
 */
int trn_hyp_check(const struct trn_hyp *h, char *err, size_t err_cap);

/*
 * Parse a hyp yaml held in memory. name: used in messages (e.g. the path). note: optional
 * callback for unknown and missing keys (NULL drops them). out: out; on error it holds the
 * defaults. err: out, err_cap bytes, one line "NAME:LINE: why" on error (may be NULL).
 * Returns 0, or -EINVAL (not YAML, not a mapping, a bad value, a duplicate key), -ENOMEM.
 * Thread-safe (libyaml keeps no global state).
 */
int trn_hyp_parse(const char *text, size_t len, const char *name, trn_hyp_note_fn note,
                  void *note_ctx, struct trn_hyp *out, char *err, size_t err_cap);

/*
 * Read and parse the file at path (as trn_hyp_parse, with name = path). Returns 0, the errors of
 * trn_hyp_parse, -EFBIG (over 1 MiB: not a hyp file), or -errno from opening or reading it
 * (err then says "PATH: strerror").
 */
int trn_hyp_load(const char *path, trn_hyp_note_fn note, void *note_ctx, struct trn_hyp *out,
                 char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* TRN_HYP_H */
