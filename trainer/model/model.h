/*
 * The YOLOv5 model definition: an ultralytics model yaml (models/yolov5s.yaml form) resolved
 * exactly as ultralytics v7.0 parse_model does, into
 *   - layers: the yaml rows, with resolved repeats, channels, strides and printed arguments;
 *   - convs: every convolution in forward order (Conv = conv + BatchNorm + SiLU, or a Detect
 *     output conv with bias);
 *   - tensors: every state-dict entry with ultralytics' NAME and SHAPE in ultralytics'
 *     state_dict order ("model.0.conv.weight", ..., "model.24.anchors", "model.24.m.0.weight"),
 *     each a view (offset, shape) into one of three flat arenas owned by the model;
 *   - the optimizer's three parameter groups, the GFLOPs and the "layers" count ultralytics
 *     prints, and a one-shot activation plan for a batch and image size.
 * See docs/recipe.md S2 for the rules this follows.
 *
 * YAML. Top-level keys: nc (int), depth_multiple, width_multiple (numbers), anchors (a list of
 * rows of w,h pixel pairs, or an integer count per level, which parse_model turns into the
 * placeholders 0, 1, ..., 2n - 1 on every level for AutoAnchor to replace), backbone and head
 * (lists of [from, number, module, args]), optional ch (input channels, default 3) and activation
 * (only nn.SiLU() is accepted). Other keys are ignored, as ultralytics ignores them. Scalars follow
 * YAML 1.1 as PyYAML reads them (False/True/yes/no/on/off are booleans, "1e3" is a string).
 * Layers are numbered from 0 over backbone then head. `from` is -1 (the previous layer; the
 * image for layer 0), -k (k layers back), an absolute index of an earlier layer, or a list of
 * those (Concat, Detect). String arguments are evaluated as parse_model's eval() would for the
 * names it knows here: nc, anchors, None, True, False and numeric literals; any other string
 * ('nearest') stays a string.
 *
 * MODULES. Conv [c2, k=1, s=1, p=None] (groups, dilation and act must keep their defaults),
 * Bottleneck [c2, shortcut=True, g=1, e=0.5], C3 [c2, shortcut=True, g=1, e=0.5], SPPF [c2, k=5],
 * nn.Upsample [None, scale, 'nearest'] (also spelled Upsample or torch.nn.Upsample), Concat [1],
 * Detect [nc, anchors] (exactly one, the last layer). Anything else is refused with the layer
 * number and name: "yolov5s.yaml:18: layer 7: unknown module 'C2f'". Channels follow
 * parse_model: c2 = make_divisible(c2 * width_multiple, 8) unless c2 equals the Detect output
 * width; repeats n' = max(round(n * depth_multiple), 1) for n > 1 with Python's round (half to
 * even); C3 takes n' bottlenecks inside one module, other modules with n' > 1 become an
 * nn.Sequential of n' copies (parameter names get a ".j" level, "model.3.1.conv.weight").
 *
 * ERRORS. Functions returning int give >= 0 on success and a negative code on failure:
 * -errno (-ENOENT, -EIO, -ENOMEM, -EINVAL for bad arguments) or -TRN_MODEL_E* below.
 * trn_strerror() names each. Where a function takes (err, err_cap), a failure also writes
 * a one-line message there naming the file and the 1-based line ("yolov5s.yaml:12: ..."; for
 * YAML syntax errors "file:line:column: ..."). The library never prints and never exits.
 *
 * THREADS. A model is immutable after trn_model_parse/trn_model_load except for its arenas'
 * contents (trn_model_init and the caller write those); const functions may be called from
 * any number of threads at once.
 */
#ifndef TRN_MODEL_H
#define TRN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model error codes (TRN_MODEL_E*, returned negated) are in errors.h, named by trn_strerror. */

/* Limits that keep a hostile yaml from asking for absurd memory. */
#define TRN_MODEL_MAX_LAYERS   512         /* yaml rows */
#define TRN_MODEL_MAX_REPEATS  64          /* resolved n' per row */
#define TRN_MODEL_MAX_CHANNELS 16384       /* channels of any tensor */
#define TRN_MODEL_MAX_FROM     8           /* entries of a `from` list */
#define TRN_MODEL_MAX_LEVELS   8           /* Detect inputs (rows of anchors) */
#define TRN_MODEL_MAX_ANCHORS  16          /* anchors per level */
#define TRN_MODEL_MAX_PARAMS   (1ll << 30) /* elements per arena (yolov5x: 87 M) */

/* Each tensor in an arena starts at a multiple of this many elements (64 bytes of float). */
#define TRN_MODEL_ALIGN 16

/* BatchNorm constants every Conv gets from initialize_weights (recipe S2). */
#define TRN_MODEL_BN_EPS      1e-3f
#define TRN_MODEL_BN_MOMENTUM 0.03f

/* ---------------------------------------------------------------------------------------- */
/* Description                                                                              */

/* What a yaml row builds. */
enum trn_module {
    TRN_MOD_CONV,       /* Conv: conv (no bias) -> BatchNorm2d -> SiLU */
    TRN_MOD_BOTTLENECK, /* cv1 1x1 -> cv2 3x3, plus the input if shortcut (c1 == c2) */
    TRN_MOD_C3,         /* cv3(cat[m(cv1(x)), cv2(x)]), m = n bottlenecks (e = 1.0) */
    TRN_MOD_SPPF,       /* cv2(cat[x, p(x), p(p(x)), p(p(p(x)))]), x = cv1(in), p = maxpool */
    TRN_MOD_UPSAMPLE,   /* nearest neighbour, integer factor */
    TRN_MOD_CONCAT,     /* along channels, in `from` order */
    TRN_MOD_DETECT,     /* one 1x1 conv with bias per level, na*(nc+5) outputs */
};

/* The three flat arenas every tensor lives in. */
enum trn_arena {
    TRN_ARENA_PARAM = 0, /* float: trainable parameters (gradients, optimizer state: same layout) */
    TRN_ARENA_BUFFER,    /* float: BN running_mean / running_var, Detect anchors (grid units) */
    TRN_ARENA_COUNT,     /* int64_t: BN num_batches_tracked */
    TRN_ARENA_N
};

/* What a tensor is, for initialisation, optimizer groups and checkpoint mapping. */
enum trn_tensor_role {
    TRN_T_CONV_WEIGHT,   /* [c2, c1, k, k] conv of a Conv (no bias) */
    TRN_T_BN_WEIGHT,     /* [c2] gamma */
    TRN_T_BN_BIAS,       /* [c2] beta */
    TRN_T_BN_MEAN,       /* [c2] running_mean (buffer) */
    TRN_T_BN_VAR,        /* [c2] running_var (buffer) */
    TRN_T_BN_COUNT,      /* [] num_batches_tracked (int64 buffer) */
    TRN_T_DETECT_WEIGHT, /* [na*no, c_in, 1, 1] Detect output conv */
    TRN_T_DETECT_BIAS,   /* [na*no] */
    TRN_T_ANCHORS,       /* [nl, na, 2] anchors in grid units (pixels / stride), buffer */
};

/* One state-dict entry: a named view into an arena. */
struct trn_tensor {
    char name[64];             /* ultralytics' state-dict key, e.g. "model.2.m.0.cv1.bn.bias" */
    enum trn_tensor_role role; /* see above */
    enum trn_arena arena;      /* which arena holds it */
    size_t offset;             /* elements from the arena start; a multiple of TRN_MODEL_ALIGN
                                  for the float arenas */
    int ndim;                  /* 0 (num_batches_tracked) .. 4 */
    int shape[4];              /* dims in PyTorch order; unused dims are 1 */
    size_t numel;              /* product of the dims (1 for ndim 0) */
    int layer;                 /* yaml row it belongs to */
    int conv;                  /* index in the conv list, -1 for anchors */
};

/* One convolution, in forward order (see struct trn_layer for the order inside a layer). */
struct trn_conv {
    char name[48]; /* module path, e.g. "model.2.m.0.cv1" or "model.24.m.1" */
    int layer;     /* yaml row */
    int c1, c2;    /* input / output channels */
    int k, s, p;   /* square kernel, stride, zero padding */
    bool bn;       /* true: Conv (no bias, BN eps 1e-3 momentum 0.03, SiLU); false: Detect conv
                      with bias and no activation */
    int weight;    /* tensor index of the conv weight */
    int bias;      /* tensor index of the bias (Detect only), else -1 */
    int bn_weight, bn_bias, bn_mean, bn_var, bn_count; /* tensor indices, -1 for Detect */
};

/*
 * One yaml row, resolved. Its convs are convs[conv0 .. conv0 + n_conv - 1], in this order:
 *   Conv:       the n copies, applied in sequence.
 *   Bottleneck: per copy r (r < n): cv1 = conv0 + 2r, cv2 = conv0 + 2r + 1.
 *   C3:         cv1, cv2, cv3, then per bottleneck b < n: m.b.cv1, m.b.cv2 (state-dict order;
 *               forward: y = cv1(x) -> bottlenecks; cv3(cat[y, cv2(x)])).
 *   SPPF:       cv1, cv2.
 *   Detect:     the output conv of each level l < nl (input: from[l]).
 *   Upsample, Concat: none.
 */
struct trn_layer {
    int index;            /* row number, 0-based over backbone then head */
    size_t line;          /* 1-based line of the row in the yaml */
    enum trn_module type; /* what it builds */
    int n;                /* resolved repeats n' (C3: bottlenecks; Conv/Bottleneck: copies) */
    int n_from;           /* entries in from[] */
    int from[TRN_MODEL_MAX_FROM]; /* absolute layer indices of the inputs; -1 = the image */
    char from_text[64];           /* `from` as ultralytics prints it: "-1", "[-1, 6]" */
    int c_in;                     /* channels of the first input (Concat: sum of inputs) */
    int c_out;                    /* output channels (Detect: na * no, per level) */
    int hidden;                   /* c_ of C3 / Bottleneck / SPPF; 0 otherwise */
    bool shortcut;                /* Bottleneck/C3: residual add inside each bottleneck */
    int k, s, p;                  /* Conv: kernel, stride, padding; SPPF: k = pool kernel */
    int scale;                    /* Upsample factor */
    int stride;                   /* output downsampling vs the image at the 256x256 probe (8 =
                                     P3); 0 if not a whole number */
    int conv0, n_conv;            /* its convs, see above */
    int64_t n_params;             /* trainable parameters of the row */
    const char *module_name;      /* as ultralytics prints it: "models.common.C3" */
    const char *args_text;        /* resolved arguments as ultralytics prints them: "[64, 64, 1]" */
};

/* Model-wide facts. */
struct trn_model_info {
    char name[64];         /* summary name: the cfg file's stem with "yolov5" -> "YOLOv5" */
    int nc;                /* classes of the Detect head (after any override) */
    int nc_yaml;           /* nc as written in the yaml */
    int ch;                /* input channels */
    double depth_multiple; /* gd */
    double width_multiple; /* gw */
    int n_layers;          /* yaml rows */
    int n_convs;           /* entries of the conv list */
    int n_tensors;         /* state-dict entries */
    int detect;            /* row index of Detect (the last row) */
    int nl, na, no;        /* detection levels, anchors per level, outputs per anchor (nc + 5) */
    int stride[TRN_MODEL_MAX_LEVELS]; /* per level, from a 256x256 probe as ultralytics does */
    float anchors_px[TRN_MODEL_MAX_LEVELS][TRN_MODEL_MAX_ANCHORS][2]; /* w, h in pixels, after
                                                                         check_anchor_order */
    bool anchors_reversed;         /* check_anchor_order flipped the levels (ultralytics logs it) */
    int64_t n_params;              /* trainable parameters = gradients ("1872157" for yolov5n) */
    int64_t n_bn_channels;         /* sum of BN widths; n_params - this = the fused count */
    int n_modules;                 /* len(list(model.modules())): the "layers" ultralytics prints */
    size_t arena_len[TRN_ARENA_N]; /* elements per arena, padding included */
};

/* Options for trn_model_parse / trn_model_load. */
struct trn_model_opts {
    int nc;           /* > 0: override the yaml's nc (a dataset with other classes); 0: keep */
    const char *name; /* summary name; NULL: derived from the file name */
};

/* Fill o with the defaults (no override). */
void trn_model_opts_default(struct trn_model_opts *o);

struct trn_model;

/*
 * Build a model from yaml text. text/len: the yaml (need not be NUL-terminated). file: the name
 * used in messages and, unless opts->name, for the summary name. opts: NULL for defaults.
 * out: on success a new model (free with trn_model_destroy); untouched on error.
 * Returns 0, -TRN_MODEL_ESYNTAX, -TRN_MODEL_ESCHEMA (also: more than TRN_MODEL_MAX_PARAMS),
 * -TRN_MODEL_EUNSUPPORTED, -TRN_MODEL_ESHAPE (the 256x256 probe ultralytics runs fails, e.g. a
 * Concat of different sizes), -ENOMEM, -EINVAL (NULL arguments, a bad opts->nc); err gets the
 * message. The arenas are allocated and zeroed; call trn_model_init for initial weights.
 */
int trn_model_parse(const char *text, size_t len, const char *file,
                    const struct trn_model_opts *opts, struct trn_model **out, char *err,
                    size_t err_cap);

/* As trn_model_parse, reading the file at path (at most 1 MiB). Adds -errno of open/read
 * (-ENOENT, -EACCES, -EIO), -EINVAL (not a regular file) and -EFBIG. */
int trn_model_load(const char *path, const struct trn_model_opts *opts, struct trn_model **out,
                   char *err, size_t err_cap);

/* Free a model and its arenas. NULL is allowed. Pointers into it become invalid. */
void trn_model_destroy(struct trn_model *m);

/*
 * Find a --cfg argument: cfg as given if that file exists; else, when cfg names no directory,
 * "<dir>/<cfg>" then "<dir>/<cfg>.yaml" for dir in: $FFYOLO_MODELS_DIR, "models" (the
 * repository root as working directory), and models_dir (callers pass the build-time
 * TRN_MODELS_DIR, the source tree's models). dst/dst_cap: out, the path found.
 * Returns 0, -ENOENT (none exists), -ENAMETOOLONG.
 */
int trn_model_cfg_find(const char *cfg, const char *models_dir, char *dst, size_t dst_cap);

/* Model-wide facts; valid for the model's life. */
const struct trn_model_info *trn_model_info(const struct trn_model *m);

/* Row i (0 <= i < n_layers), conv i (< n_convs), tensor i (< n_tensors); NULL if out of range.
 * Valid for the model's life. */
const struct trn_layer *trn_model_layer(const struct trn_model *m, int i);
const struct trn_conv *trn_model_conv(const struct trn_model *m, int i);
const struct trn_tensor *trn_model_tensor(const struct trn_model *m, int i);

/* Index of the tensor with this state-dict name, or -ENOENT. */
int trn_model_find(const struct trn_model *m, const char *name);

/*
 * Pretrained weights onto another model, as train.py's intersect_dicts + load_state_dict(strict=
 * False): every tensor of dst whose name src has, with the same shape and the same kind (float
 * or the int64 batch counter), is copied from src; the rest of dst stays as it is (a fresh
 * model's initial state). anchors false leaves dst's Detect anchors alone (train.py's exclude =
 * ['anchor'] when --cfg or the hyp's anchors give the architecture). Returns how many of dst's
 * trn_model_info(dst)->n_tensors were copied (train.py's "Transferred N/M items"), -EINVAL.
 */
int trn_model_transfer(struct trn_model *dst, const struct trn_model *src, bool anchors);

/*
 * The optimizer's parameter groups as ultralytics builds them (smart_optimizer; recipe S4),
 * each in model.modules() order:
 *   0: biases: BN betas and Detect biases (no weight decay);
 *   1: conv weights, Detect included (weight decay);
 *   2: BN weights (gammas) (no weight decay).
 * For yolov5s: 60, 60 and 57 tensors. idx: out, tensor indices valid for the model's life.
 * Returns the count, or -EINVAL for another group.
 */
int trn_model_group(const struct trn_model *m, int group, const int **idx);

/*
 * The arenas, owned by the model: TRN_ARENA_PARAM and TRN_ARENA_BUFFER hold float,
 * TRN_ARENA_COUNT holds int64_t, each info->arena_len[a] elements; padding between tensors is
 * zero and stays zero under any elementwise update (gradients, optimizer state and EMA copies
 * use the same layout: allocate arena_len[a] elements and use the same offsets). NULL for a
 * bad arena. The pointer is valid for the model's life.
 */
void *trn_model_arena(struct trn_model *m, enum trn_arena a);
const void *trn_model_arena_const(const struct trn_model *m, enum trn_arena a);

/* ---------------------------------------------------------------------------------------- */
/* Initial weights                                                                          */

/*
 * Write ultralytics' initial state (recipe S2) into the arenas, deterministically from seed:
 *   conv weights (Conv and Detect) and Detect biases ~ U(-b, b), b = 1/sqrt(fan_in), fan_in =
 *   c1*k*k (kaiming_uniform with a = sqrt 5; PyTorch's Conv2d bias default uses the same b);
 *   BN gamma 1, beta 0, running mean 0, var 1, num_batches_tracked 0; Detect biases of level
 *   l, anchor a: += ln(8 / (640 / stride_l)^2) at a*no + 4 (objectness) and
 *   += ln(0.6 / (nc - 0.99999)) at a*no + 5 .. a*no + 4 + nc (classes); anchors = pixels /
 *   stride; then every float is rounded to the nearest fp16 value (ties to even), as
 *   model.half().float() does in train.py.
 *
 * THE GENERATOR, exactly, so that numpy can rebuild the same weights bit for bit. For the
 * tensor with index k in the state-dict order (trn_model_tensor(m, k)) and its element j
 * (row-major, C order):
 *   block = philox4x32_10(ctr = [q & 0xffffffff, q >> 32, k, 0x6d6f646c], key = [seed &
 *           0xffffffff, seed >> 32]) with q = j // 4 (Random123's Philox4x32-10, the sampler's
 *           trn_philox4x32_10);
 *   r = block[j % 4];  u = float32((r >> 8) * 2^-24)   (exact, in [0, 1));
 *   w = float32(float32(2 * u - 1) * bound),  bound = float32(1 / sqrt(float64(fan_in)));
 * all float32 arithmetic rounded to nearest, as numpy float32 does. Detect bias adjustments are
 * float32 additions of float32(c): c_obj = ln(float64(float32(8 / float32(640 / s)^2))) (the
 * stride is a float32 tensor in ultralytics), c_cls = ln(0.6 / (nc - 0.99999)) in float64. The
 * fp16 rounding is numpy's astype(float16).astype(float32). Tensors that are not random
 * (BN, anchors) draw nothing; k still counts them.
 *
 * Returns 0. Thread-safe for distinct models.
 */
int trn_model_init(struct trn_model *m, uint64_t seed);

/* The generator's value u in [0, 1) for (seed, tensor k, element j), as trn_model_init uses it.
 * For tests and for checking a numpy re-implementation. */
float trn_model_init_uniform(uint64_t seed, uint32_t k, uint64_t j);

/* Round a float to the nearest fp16-representable value (ties to even; overflow to +-inf; NaN
 * stays NaN), returned as float. */
float trn_model_round_fp16(float x);

/* ---------------------------------------------------------------------------------------- */
/* Size, summary                                                                            */

/*
 * GFLOPs at imgsz x imgsz as ultralytics reports them: thop's counts on a stride x stride probe
 * (stride = max(max Detect stride, 32)), i.e. conv multiply-adds (bias not counted) + 4 per
 * BatchNorm input element + 1 per nearest-upsample output element, times 2 / 1e9, scaled by
 * (imgsz / stride)^2. fused: count as after Conv+BN fusion (no BN term), which is what
 * ultralytics prints after "Fusing layers...". yolov5s: 16.6 (fused 16.4) at 640.
 */
double trn_model_gflops(const struct trn_model *m, int imgsz, bool fused);

/*
 * The summary ultralytics prints when it builds a model: the "Overriding model.yaml nc=..."
 * line if nc was overridden, a blank line, the per-layer table (from, n, params, module,
 * arguments; same column widths), and
 * "YOLOv5s summary: 214 layers, 7235389 parameters, 7235389 gradients, 16.6 GFLOPs".
 * dst/dst_cap: out, NUL-terminated, truncated to fit (dst may be NULL with dst_cap 0).
 * Returns the full length (like snprintf), or -ENOMEM.
 */
int trn_model_summary(const struct trn_model *m, char *dst, size_t dst_cap);

/*
 * model_info's summary line alone, "NAME summary: L layers, P parameters, G gradients, X GFLOPs",
 * at imgsz (GFLOPs as trn_model_gflops). fused: as after ultralytics' Model.fuse() (the line
 * val.py prints after "Fusing layers... "): each Conv's BatchNorm gone (one module less) and
 * folded into a conv bias (c2 parameters where the BN had 2 c2), its GFLOPs without the BN term,
 * and gradients only for the parameters fusion did not make (the Detect convs), or 0 with
 * no_grad (a released checkpoint, whose parameters strip_optimizer froze). Returns as
 * trn_model_summary.
 */
int trn_model_summary_line(const struct trn_model *m, int imgsz, bool fused, bool no_grad,
                           char *dst, size_t dst_cap);

/* ---------------------------------------------------------------------------------------- */
/* Activation plan                                                                          */

/* One activation tensor, N x C x H x W float, in the activation arena. */
struct trn_act {
    char name[56]; /* e.g. "input", "model.2.cv1.conv", "model.2.cv1.act",
                      "model.2.m.0.add", "model.2.cat", "model.9.pool1", "model.11.out" */
    size_t offset; /* floats from the arena start, a multiple of TRN_MODEL_ALIGN */
    int n, c, h, w;
    size_t numel;    /* n*c*h*w */
    size_t doff;     /* its gradient: floats from the start of the gradient arena (dtotal floats), a
                        multiple of TRN_MODEL_ALIGN. Acts whose gradients are equal by construction
                        share one: a bottleneck's input whose only readers are that bottleneck's
                        cv1 and residual add has the add's (see trn_model_plan). */
    size_t nstride;  /* 0: dense (image i at offset + i c h w). Else the act is a channel slice
                        of a concat buffer (CONCAT SLICES in trn_model_plan): image i at
                        offset + i * nstride, nstride = the buffer's c h w; offset then lies
                        inside the buffer's range */
    size_t dnstride; /* the same for its gradient at doff (0: dense) */
};

/* Where each conv reads and writes (indices into acts). */
struct trn_act_conv {
    int in;   /* input */
    int conv; /* conv output (pre-BN; Detect: the head output incl. bias) */
    int bn;   /* always -1: BN and SiLU run fused, no pre-SiLU tensor is kept (the field stays for
                 the layout's callers) */
    int act;  /* SiLU output; -1 for Detect, and for a bottleneck cv2 with shortcut, whose SiLU
                 output is never stored: its forward writes silu(bn) + input into add at once,
                 and the gradient of its SiLU output is add's */
    int add;  /* bottleneck cv2 with shortcut: its SiLU output + the bottleneck input (the
                 input: convs[this - 1].in); else -1 */
};

/* Per row: its output and internal buffers (indices into acts, -1 if none). */
struct trn_act_layer {
    int out;     /* the row's output (Detect: level 0's conv output; see convs for others) */
    int cat;     /* C3 / SPPF / Concat concatenation buffer */
    int pool[3]; /* SPPF: the three max-pool outputs */
    int c, h, w; /* output shape per image (Detect: level 0) */
};

/* Everything the forward pass writes for one batch size and image size. */
struct trn_act_plan {
    int batch, h, w;              /* what it was planned for */
    int n_acts;                   /* entries of acts */
    struct trn_act *acts;         /* acts[0] is the input image batch (N x ch x H x W) */
    struct trn_act_conv *convs;   /* per conv of the model */
    struct trn_act_layer *layers; /* per row */
    size_t total;                 /* floats in the arena, padding included */
    size_t dtotal;                /* floats in the gradient arena (acts[].doff), padding
                                     included; <= total */
};

/*
 * Plan the activations of a forward pass at batch x ch x h x w: every conv's output, BN output
 * and SiLU output (but a shortcut bottleneck cv2's, see trn_act_conv.act), residual sums,
 * concatenation buffers, pool and upsample outputs, the Detect outputs, each at its own offset,
 * so one allocation of plan->total floats serves every step. Their gradients get offsets (doff)
 * in a second arena of plan->dtotal floats; a bottleneck input x shares its residual sum's
 * gradient when nothing else reads x (inside a C3: always; the input of a Bottleneck row's first
 * copy: when no other row reads the same row output, and it is not the image), since dL/dx =
 * dL/dsum + what cv1 adds: cv1's backward accumulates into the sum's gradient after cv2's
 * backward has read it, with no copy.
 * CONCAT SLICES. A concat input that fills exactly one concat slot, is not the image, is written
 * by a BN+SiLU (+add), max pool or upsample and starts TRN_MODEL_ALIGN-aligned in its slot is
 * placed in its concat buffer's channel slice (nstride != 0): its producer writes the buffer and
 * its readers read it there, so the forward needs no copy and the arena has no separate tensor
 * for it. Its gradient is placed in the buffer's gradient slice too (dnstride != 0) when no other
 * reader of that gradient storage (the act and those sharing it) runs its backward before the
 * buffer's readers have written the buffer's gradient (they overwrite it whole): readers in rows
 * below the first reader of a Concat row's buffer, or inside the C3 / SPPF row owning it. Others
 * keep a dense gradient and a copy out of the buffer's.
 * out: filled on success; free with trn_act_plan_free. Returns 0, -EINVAL (batch, h or w < 1),
 * -TRN_MODEL_ESHAPE (e.g. h not a multiple of the largest stride makes a Concat's inputs
 * differ; err says which row), -ENOMEM.
 */
int trn_model_plan(const struct trn_model *m, int batch, int h, int w, struct trn_act_plan *out,
                   char *err, size_t err_cap);

/* Free what trn_model_plan allocated; p may be zeroed or NULL. */
void trn_act_plan_free(struct trn_act_plan *p);

#ifdef __cplusplus
}
#endif

#endif
