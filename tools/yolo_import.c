/*
 * yolo-import: read an ultralytics / PyTorch .pt checkpoint without Python, print what it holds,
 * and check that it maps onto our model, tensor by tensor.
 *
 *   yolo-import FILE.pt [--ema | --model | --key K] [--cfg MODEL] [--table] [-o OUT]
 *
 * The architecture comes from --cfg, or else from the yaml the checkpoint carries (model.yaml).
 * Our own checkpoint format does not exist yet, so -o is refused with a message; the mapping
 * check and the copy into the model's arenas (trn_pt_load_into_model) are what the trainer and
 * the validator use.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "argparse.h"
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
               "write our checkpoint (not available yet: our format does not exist)"),
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
    if (out) {
        fprintf(stderr,
                "yolo-import: -o %s: our checkpoint format does not exist yet; nothing "
                "written\nhint: run without -o to check the mapping\n",
                out);
        return 2;
    }
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
    if (table) {
        float *buf = NULL;
        size_t cap = 0;
        printf("%-36s %-5s %-18s %-8s %16s %16s %8s\n", "name", "dtype", "shape", "storage", "sum",
               "abs_sum", "crc32");
        for (int i = 0; i < n; i++) {
            const struct trn_pt_tensor *t = &sd[i];
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
            if (trn_pt_tensor_read_f32(pt, t, buf, cap) == t->numel) {
                for (int64_t k = 0; k < t->numel; k++)
                    sum += buf[k], asum += fabs(buf[k]);
                crc = crc32(crc, (const Bytef *)buf, (uInt)((size_t)t->numel * sizeof *buf));
            }
            printf("%-36s %-5s ", t->name, trn_pt_dtype_name(t->dtype));
            print_shape(t->ndim, t->shape);
            printf(" %-8s %16.6f %16.6f %08lx\n", t->storage_key, sum, asum, (unsigned long)crc);
        }
        free(buf);
    }

    /* The model to map onto: --cfg, else the checkpoint's own yaml. */
    struct trn_model *m = NULL;
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    if (cfg) {
        char mpath[1024];
        if (trn_model_cfg_find(cfg, TRN_MODELS_DIR, mpath, sizeof mpath) != 0) {
            fprintf(stderr, "yolo-import: --cfg %s: no such model yaml\n", cfg);
            trn_pt_close(pt);
            return 1;
        }
        rc = trn_model_load(mpath, &o, &m, err, sizeof err);
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
        free(y);
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
    if (rc) {
        fprintf(stderr, "yolo-import: %s\n", err);
    } else {
        printf("OK: every tensor maps onto the model and was copied into its arenas\n");
    }
    trn_model_destroy(m);
    trn_pt_close(pt);
    return rc ? 1 : 0;
}
