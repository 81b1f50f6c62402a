/*
 * Mapping a checkpoint's state dict onto our model (trainer/model/model.h): by state-dict name and
 * shape, then copying into the model's arenas.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ptload.h"

static int problem(struct trn_pt_match *mt, char *err, size_t err_cap, const char *fmt,
                   const char *name, const char *extra)
{
    if (!mt->first_problem[0])
        snprintf(mt->first_problem, sizeof mt->first_problem, fmt, name, extra);
    (void)err;
    (void)err_cap;
    return 0;
}

static void shape_str(char *dst, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(dst, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(dst + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(dst + n, cap - n, "]");
}

int trn_pt_match_model(struct trn_pt *pt, const char *which, const struct trn_model *m,
                       struct trn_pt_match *mt, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!pt || !m || !mt) return -EINVAL;
    memset(mt, 0, sizeof *mt);
    const struct trn_pt_tensor *sd;
    const int n = trn_pt_state_dict(pt, which, &sd, err, err_cap);
    if (n < 0) return n;
    const struct trn_model_info *info = trn_model_info(m);
    mt->n_ckpt = n;
    mt->n_model = info->n_tensors;
    mt->model_params = info->n_params;
    char *seen = calloc((size_t)info->n_tensors + 1, 1);
    if (!seen) return -ENOMEM;
    char a[64], b[64];
    for (int i = 0; i < n; i++) {
        if (sd[i].parameter) mt->ckpt_params += sd[i].numel;
        const int k = trn_model_find(m, sd[i].name);
        if (k < 0) {
            mt->n_unexpected++;
            problem(mt, err, err_cap, "%s%s: in the checkpoint, not in the model", sd[i].name, "");
            continue;
        }
        const struct trn_tensor *t = trn_model_tensor(m, k);
        int64_t ms[4] = { t->shape[0], t->shape[1], t->shape[2], t->shape[3] };
        bool same = t->ndim == sd[i].ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = ms[d] == sd[i].shape[d];
        if (seen[k]) same = false;
        /* num_batches_tracked lands in the int64 arena: a float there would not convert. */
        const bool is_float = sd[i].dtype == TRN_PT_F16 || sd[i].dtype == TRN_PT_BF16 ||
                              sd[i].dtype == TRN_PT_F32 || sd[i].dtype == TRN_PT_F64;
        if (t->arena == TRN_ARENA_COUNT && is_float) same = false;
        seen[k] = 1;
        if (!same) {
            mt->n_shape++;
            shape_str(a, sizeof a, sd[i].ndim, sd[i].shape);
            shape_str(b, sizeof b, t->ndim, ms);
            char extra[160];
            snprintf(extra, sizeof extra, ": checkpoint shape %s, model shape %s", a, b);
            problem(mt, err, err_cap, "%s%s", sd[i].name, extra);
            continue;
        }
        mt->n_matched++;
    }
    for (int k = 0; k < info->n_tensors; k++) {
        if (seen[k]) continue;
        mt->n_missing++;
        problem(mt, err, err_cap, "%s%s: in the model, not in the checkpoint",
                trn_model_tensor(m, k)->name, "");
    }
    free(seen);
    if (mt->n_matched == n && mt->n_matched == info->n_tensors) return 0;
    if (err && err_cap)
        snprintf(err, err_cap,
                 "checkpoint does not match the model: %d of %d tensors match (%d unexpected, "
                 "%d missing, %d with another shape); first: %s",
                 mt->n_matched, n, mt->n_unexpected, mt->n_missing, mt->n_shape, mt->first_problem);
    return -TRN_PT_EMISMATCH;
}

int trn_pt_copy_into_model(struct trn_pt *pt, const char *which, struct trn_model *m,
                           struct trn_pt_match *mt, char *err, size_t err_cap)
{
    struct trn_pt_match local;
    if (!mt) mt = &local;
    int rc = trn_pt_match_model(pt, which, m, mt, err, err_cap);
    if (rc) return rc;
    const struct trn_pt_tensor *sd;
    const int n = trn_pt_state_dict(pt, which, &sd, err, err_cap);
    if (n < 0) return n;
    /* every tensor read matches the model's shape, so the model's size bounds what a deflated
     * archive may honestly inflate to (its dtype at most 8 bytes an element) */
    const struct trn_model_info *info = trn_model_info(m);
    const uint64_t model_bytes =
        8 * ((uint64_t)info->arena_len[TRN_ARENA_PARAM] + info->arena_len[TRN_ARENA_BUFFER] +
             info->arena_len[TRN_ARENA_COUNT]);
    if (model_bytes + (16u << 20) > TRN_PT_INFLATE_BUDGET)
        trn_pt_set_inflate_budget(pt, model_bytes + (16u << 20));
    for (int i = 0; i < n; i++) {
        const struct trn_tensor *t = trn_model_tensor(m, trn_model_find(m, sd[i].name));
        void *arena = trn_model_arena(m, t->arena);
        int64_t got;
        if (t->arena == TRN_ARENA_COUNT) {
            got = trn_pt_tensor_read_i64(pt, &sd[i], (int64_t *)arena + t->offset, t->numel);
        } else {
            got = trn_pt_tensor_read_f32(pt, &sd[i], (float *)arena + t->offset, t->numel);
        }
        if (got != (int64_t)t->numel) {
            if (err && err_cap && got < 0 && got != -TRN_PT_EUNSUPPORTED)
                snprintf(err, err_cap, "%s: storage %s: %s", sd[i].name, sd[i].storage_key,
                         trn_strerror((int)got));
            else if (err && err_cap)
                snprintf(err, err_cap, "%s: cannot convert %s to the model's type", sd[i].name,
                         trn_pt_dtype_name(sd[i].dtype));
            return got < 0 ? (int)got : -TRN_PT_EMISMATCH;
        }
    }
    return 0;
}

int trn_pt_load_into_model(const char *path, const char *which, struct trn_model *m, char *err,
                           size_t err_cap)
{
    struct trn_pt *pt;
    int rc = trn_pt_open(path, &pt, err, err_cap);
    if (rc) return rc;
    rc = trn_pt_copy_into_model(pt, which, m, NULL, err, err_cap);
    trn_pt_close(pt);
    return rc;
}
