/*
 * yolo-import: read an ultralytics / PyTorch .pt checkpoint without Python, print what it holds,
 * and check that it maps onto our model, tensor by tensor.
 *
 *   yolo-import FILE.pt [--ema | --model | --key K] [--cfg MODEL] [--table] [-o OUT]
 *
 * The architecture comes from --cfg, or else from the yaml the checkpoint carries (model.yaml).
 * The mapping check and the copy into the model's arenas (trn_pt_load_into_model) are what the
 * trainer and the validator use. -o OUT.ckpt writes those weights as our checkpoint
 * (trainer/weights/ckpt.h): model and EMA records both the .pt's weights, the model yaml, nc
 * and (for 80 classes) COCO's names; no optimizer state, so it serves --weights (yolo-train,
 * yolo-val, yolo-detect, yolo-export), not --resume.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "argparse.h"
#include "ckpt.h"
#include "dataset.h"
#include "util.h"
#include "model.h"
#include "ptload.h"
#include "errors.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

/* --key K: any top-level key, the empty one included (a plain state dict). */
static int take_key(const char *v, void *dst, char *why, size_t cap)
{
    (void)why;
    (void)cap;
    *(const char **)dst = v;
    return 0;
}

static void print_shape(int ndim, const int64_t *shape)
{
    char b[96];
    size_t n = (size_t)snprintf(b, sizeof b, "[");
    for (int i = 0; i < ndim && n < sizeof b; i++)
        n += (size_t)snprintf(b + n, sizeof b - n, "%s%" PRId64, i ? "," : "", shape[i]);
    if (n < sizeof b) snprintf(b + n, sizeof b - n, "]");
    printf("%-18s", b);
}

/* Our checkpoint of m's weights (from src): model and EMA records both these weights, no
 * optimizer state, the yaml, and metadata that yolo-val / yolo-detect / yolo-train --weights
 * read (nc, names). */
static int write_ckpt(const char *out, const char *src, struct trn_model *m, const char *yaml,
                      size_t ylen, char *err, size_t cap)
{
    const struct trn_model_info *I = trn_model_info(m);
    const size_t P = I->arena_len[TRN_ARENA_PARAM] * sizeof(float);
    const size_t B = I->arena_len[TRN_ARENA_BUFFER] * sizeof(float);
    const size_t C = I->arena_len[TRN_ARENA_COUNT] * sizeof(int64_t);
    const struct trn_ckpt_src rec[TRN_CKPT_N_RECORDS] = {
        { trn_model_arena(m, TRN_ARENA_PARAM), P },
        { trn_model_arena(m, TRN_ARENA_BUFFER), B },
        { trn_model_arena(m, TRN_ARENA_COUNT), C },
        { trn_model_arena(m, TRN_ARENA_PARAM), P },
        { trn_model_arena(m, TRN_ARENA_BUFFER), B },
        { NULL, 0 },
        { NULL, 0 },
        { NULL, 0 },
        { yaml, ylen },
        { NULL, 0 },
        { NULL, 0 },
    };
    char *meta = NULL;
    size_t mlen = 0;
    FILE *f = open_memstream(&meta, &mlen);
    if (!f) return -ENOMEM;
    fprintf(f, "format: %s\nimported_from: \"", TRN_CKPT_FORMAT);
    for (const char *p = src; *p; p++) /* a YAML double-quoted scalar */
        fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    fprintf(f, "\"\nnc: %d\narena_param: %zu\narena_buffer: %zu\narena_count: %zu\n", I->nc,
            I->arena_len[TRN_ARENA_PARAM], I->arena_len[TRN_ARENA_BUFFER],
            I->arena_len[TRN_ARENA_COUNT]);
    if (I->nc == 80) { /* ultralytics' COCO weights: their names (the .pt's list is not read) */
        fprintf(f, "names:\n");
        for (int c = 0; c < 80; c++)
            fprintf(f, "  - \"%s\"\n", pack_coco80_names[c]);
    }
    if (fclose(f) != 0) {
        free(meta);
        return -ENOMEM;
    }
    const int rc = trn_ckpt_write(out, rec, meta, mlen, err, cap);
    free(meta);
    return rc;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *which = NULL, *cfg = NULL, *out = NULL;
    bool table = false;
    int n_pos = 0;
    const struct ap_opt opts[] = {
        { .names = "--ema",
          .kind = AP_SET,
          .dst = &which,
          .choices = "ema",
          .help = "the EMA weights (default: ema if present and not None, else model)" },
        { .names = "--model",
          .kind = AP_SET,
          .dst = &which,
          .choices = "model",
          .help = "the model weights" },
        { .names = "--key",
          .kind = AP_CALL,
          .dst = &which,
          .metavar = "K",
          .help = "any top-level key; --key '' reads a plain state dict",
          .call = take_key },
        AP_OPT("--cfg", AP_STR, &cfg, "MODEL",
               "our model yaml to map onto (a path or a name such as yolov5n); default: the yaml "
               "stored in the checkpoint"),
        AP_OPT("--table", AP_FLAG, &table, NULL,
               "print every tensor: name, dtype, shape, storage, sum, crc32"),
        AP_OPT("-o", AP_STR, &out, "OUT",
               "write the weights as our checkpoint (.ckpt) for --weights"),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    const struct ap_spec sp = {
        .prog = "yolo-import",
        .usage = "FILE.pt [--ema | --model | --key K] [--cfg MODEL] [--table] [-o OUT]",
        .about = "Read an ultralytics/PyTorch checkpoint (nothing in it is executed), list its "
                 "tensors, and check their mapping onto our model.",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .positional = &path,
        .max_positional = 1,
        .n_positional = &n_pos,
        .positional_name = "FILE.pt",
    };
    const int arc = ap_parse(&sp, argc, argv);
    if (arc) return arc == AP_HELPED ? 0 : arc;
    if (!path) return ap_usage_error(&sp, "FILE.pt is required");
    const bool which_set = which != NULL;
    char err[512];
    struct trn_pt *pt;
    int rc = trn_pt_open(path, &pt, err, sizeof err);
    if (rc) {
        fprintf(stderr, "yolo-import: %s\n", err[0] ? err : trn_strerror(rc));
        return 1;
    }
    const char *key, *desc;
    const int nkeys = trn_pt_top_key(pt, 0, &key, &desc);
    printf("%s: %d top-level keys\n", path, nkeys < 0 ? 0 : nkeys);
    for (int i = 0; i < nkeys; i++) {
        trn_pt_top_key(pt, i, &key, &desc);
        printf("  %-14s %s\n", key, desc);
    }
    if (!which_set) which = trn_pt_default_key(pt);
    const struct trn_pt_tensor *sd;
    const int n = trn_pt_state_dict(pt, which, &sd, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "yolo-import: %s\n", err[0] ? err : trn_strerror(n));
        trn_pt_close(pt);
        return 1;
    }
    int64_t params = 0, elems = 0, n_f16 = 0, n_param_t = 0;
    for (int i = 0; i < n; i++) {
        elems += sd[i].numel;
        if (sd[i].parameter) params += sd[i].numel, n_param_t++;
        if (sd[i].dtype == TRN_PT_F16) n_f16++;
    }
    printf("state dict '%s': %d tensors (%" PRId64 " parameters, %" PRId64 " buffers), %" PRId64
           " parameter elements, %" PRId64 " elements in all, %" PRId64 " fp16 tensors\n",
           which ? which : "", n, n_param_t, (int64_t)n - n_param_t, params, elems, n_f16);
    int64_t nc = 0;
    const char *yaml_file = NULL;
    if (trn_pt_model_attr_int(pt, which, "nc", &nc) == 0) printf("nc: %" PRId64 "\n", nc);
    if (trn_pt_model_attr_str(pt, which, "yaml_file", &yaml_file) == 0)
        printf("yaml_file: %s\n", yaml_file);
    int unreadable = 0;
    if (table) {
        float *buf = NULL;
        size_t cap = 0;
        printf("%-36s %-5s %-18s %-8s %16s %16s %8s\n", "name", "dtype", "shape", "storage", "sum",
               "abs_sum", "crc32");
        for (int i = 0; i < n; i++) {
            const struct trn_pt_tensor *t = &sd[i];
            /* its storage first (checked, inflated within the budget): a bomb's view must not
             * cost its numel in floats before it is refused */
            const int crc_rc = trn_pt_tensor_check(pt, t);
            if (crc_rc < 0) {
                printf("%-36s %-5s ", t->name, trn_pt_dtype_name(t->dtype));
                print_shape(t->ndim, t->shape);
                printf(" %-8s unreadable\n", t->storage_key);
                if (crc_rc == -TRN_PT_ELIMIT)
                    fprintf(stderr,
                            "yolo-import: %s: %s: storage %s: inflating it passes the reader's "
                            "budget for deflated storages (%llu MiB in all): a deflate bomb?\n",
                            path, t->name, t->storage_key,
                            (unsigned long long)(TRN_PT_INFLATE_BUDGET >> 20));
                else
                    fprintf(stderr, "yolo-import: %s: %s: storage %s: %s\n", path, t->name,
                            t->storage_key, trn_strerror(crc_rc));
                unreadable++;
                continue;
            }
            if ((size_t)t->numel > cap) {
                cap = (size_t)t->numel;
                float *nb = realloc(buf, cap * sizeof *buf);
                if (!nb) {
                    fprintf(stderr, "yolo-import: out of memory\n");
                    free(buf);
                    trn_pt_close(pt);
                    return 1;
                }
                buf = nb;
            }
            double sum = 0, asum = 0;
            uLong crc = crc32(0L, Z_NULL, 0);
            const int64_t got = trn_pt_tensor_read_f32(pt, t, buf, cap);
            if (got == t->numel) {
                for (int64_t k = 0; k < t->numel; k++)
                    sum += buf[k], asum += fabs(buf[k]);
                crc = crc32(crc, (const Bytef *)buf, (uInt)((size_t)t->numel * sizeof *buf));
            }
            printf("%-36s %-5s ", t->name, trn_pt_dtype_name(t->dtype));
            print_shape(t->ndim, t->shape);
            if (got == t->numel) {
                printf(" %-8s %16.6f %16.6f %08lx\n", t->storage_key, sum, asum,
                       (unsigned long)crc);
            } else {
                printf(" %-8s unreadable\n", t->storage_key);
                fprintf(stderr, "yolo-import: %s: %s: storage %s: %s\n", path, t->name,
                        t->storage_key, trn_strerror((int)got));
                unreadable++;
            }
        }
        free(buf);
    }

    /* The model to map onto: --cfg, else the checkpoint's own yaml. */
    struct trn_model *m = NULL;
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    char *yaml_text = NULL;
    size_t yaml_len = 0;
    if (cfg) {
        char mpath[1024];
        if (trn_model_cfg_find(cfg, TRN_MODELS_DIR, mpath, sizeof mpath) != 0) {
            fprintf(stderr, "yolo-import: --cfg %s: no such model yaml\n", cfg);
            trn_pt_close(pt);
            return 1;
        }
        rc = trn_model_load(mpath, &o, &m, err, sizeof err);
        if (rc == 0 && out) {
            char e[256];
            rc = trn_read_file(mpath, TRN_CKPT_MAX_TEXT, &yaml_text, &yaml_len, e, sizeof e);
            if (rc < 0) snprintf(err, sizeof err, "%s", e);
        }
    } else {
        const int len = trn_pt_model_yaml(pt, which, NULL, 0);
        char *y = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (len < 0 || !y) {
            fprintf(stderr, "yolo-import: the checkpoint carries no model yaml\nhint: pass "
                            "--cfg yolov5n (or the yaml it was trained from)\n");
            free(y);
            trn_pt_close(pt);
            return 1;
        }
        trn_pt_model_yaml(pt, which, y, (size_t)len + 1);
        /* The stored file name gives the summary name ("YOLOv5n") and the messages' file. */
        rc = trn_model_parse(y, (size_t)len, yaml_file ? yaml_file : "model.yaml", &o, &m, err,
                             sizeof err);
        yaml_text = y;
        yaml_len = (size_t)len;
    }
    if (rc) {
        fprintf(stderr, "yolo-import: %s\n", err);
        trn_pt_close(pt);
        return 1;
    }
    struct trn_pt_match mt;
    rc = trn_pt_copy_into_model(pt, which, m, &mt, err, sizeof err);
    const struct trn_model_info *info = trn_model_info(m);
    printf("model %s: %d tensors, %" PRId64 " parameters\n", info->name, mt.n_model,
           mt.model_params);
    printf("mapping: %d of %d checkpoint tensors match by name and shape; %d unexpected, %d "
           "missing, %d with another shape; parameters %" PRId64 " (checkpoint) vs %" PRId64
           " (model)\n",
           mt.n_matched, mt.n_ckpt, mt.n_unexpected, mt.n_missing, mt.n_shape, mt.ckpt_params,
           mt.model_params);
    if (rc == 0 && mt.ckpt_params != mt.model_params) {
        snprintf(err, sizeof err, "parameter counts differ");
        rc = -TRN_PT_EMISMATCH;
    }
    if (rc == 0 && unreadable) {
        snprintf(err, sizeof err, "%d tensor%s of the table could not be read (above)", unreadable,
                 unreadable == 1 ? "" : "s");
        rc = -TRN_PT_ELIMIT;
    }
    if (rc) {
        fprintf(stderr, "yolo-import: %s\n", err);
    } else {
        printf("OK: every tensor maps onto the model and was copied into its arenas\n");
    }
    if (rc == 0 && out) {
        rc = write_ckpt(out, path, m, yaml_text, yaml_len, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "yolo-import: -o %s: %s\n", out, err);
        else
            printf("wrote %s: our checkpoint of these weights (for --weights; not --resume)\n",
                   out);
    }
    free(yaml_text);
    trn_model_destroy(m);
    trn_pt_close(pt);
    return rc ? 1 : 0;
}
