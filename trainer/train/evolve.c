/* evolve: train.py --evolve's selection, mutation and files (evolve.h). */
#include "evolve.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plots.h"
#include "sampler.h"
#include "util.h"

/* train.py's meta: (mutation scale, lower limit, upper limit), in hyp.scratch-low.yaml's order
 * with anchors appended; offsets into struct trn_hyp alongside. */
#define K(n, g, lo, hi) \
    {                   \
#n, g, lo, hi   \
    }
static const struct trn_evolve_key keys[] = {
    K(lr0, 1, 1e-5, 1e-1),        K(lrf, 1, 0.01, 1.0),        K(momentum, 0.3, 0.6, 0.98),
    K(weight_decay, 1, 0, 0.001), K(warmup_epochs, 1, 0, 5.0), K(warmup_momentum, 1, 0, 0.95),
    K(warmup_bias_lr, 1, 0, 0.2), K(box, 1, 0.02, 0.2),        K(cls, 1, 0.2, 4.0),
    K(cls_pw, 1, 0.5, 2.0),       K(obj, 1, 0.2, 4.0),         K(obj_pw, 1, 0.5, 2.0),
    K(iou_t, 0, 0.1, 0.7),        K(anchor_t, 1, 2.0, 8.0),    K(fl_gamma, 0, 0, 2.0),
    K(hsv_h, 1, 0, 0.1),          K(hsv_s, 1, 0, 0.9),         K(hsv_v, 1, 0, 0.9),
    K(degrees, 1, 0, 45.0),       K(translate, 1, 0, 0.9),     K(scale, 1, 0, 0.9),
    K(shear, 1, 0, 10.0),         K(perspective, 0, 0, 0.001), K(flipud, 1, 0, 1.0),
    K(fliplr, 0, 0, 1.0),         K(mosaic, 1, 0, 1.0),        K(mixup, 1, 0, 1.0),
    K(copy_paste, 1, 0, 1.0),     K(anchors, 2, 2.0, 10.0),
};
#undef K
#define N_ALL ((int)(sizeof keys / sizeof keys[0]))

#define O(n) offsetof(struct trn_hyp, n)
static const size_t offsets[N_ALL] = {
    O(lr0),
    O(lrf),
    O(momentum),
    O(weight_decay),
    O(warmup_epochs),
    O(warmup_momentum),
    O(warmup_bias_lr),
    O(box),
    O(cls),
    O(cls_pw),
    O(obj),
    O(obj_pw),
    O(iou_t),
    O(anchor_t),
    O(fl_gamma),
    O(hsv_h),
    O(hsv_s),
    O(hsv_v),
    O(degrees),
    O(translate),
    O(scale),
    O(shear),
    O(perspective),
    O(flipud),
    O(fliplr),
    O(mosaic),
    O(mixup),
    O(copy_paste),
    O(anchors),
};
#undef O

static const char *const result_keys[TRN_EVOLVE_RESULT] = {
    "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
    "val/box_loss",      "val/obj_loss",   "val/cls_loss",
};

int trn_evolve_keys(bool anchors, const struct trn_evolve_key **out)
{
    if (out) *out = keys;
    return anchors ? N_ALL : N_ALL - 1;
}

double trn_evolve_fitness(const double r[TRN_EVOLVE_RESULT])
{
    return 0.1 * r[2] + 0.9 * r[3];
}

int trn_evolve_from_hyp(const struct trn_hyp *h, bool anchors, double *v)
{
    const int n = trn_evolve_keys(anchors, NULL);
    for (int i = 0; i < n; i++)
        memcpy(&v[i], (const char *)h + offsets[i], sizeof(double));
    if (anchors && v[n - 1] == 0) v[n - 1] = 3; /* train.py: 'anchors' not in hyp -> 3 */
    return n;
}

void trn_evolve_to_hyp(const double *v, bool anchors, struct trn_hyp *h)
{
    const int n = trn_evolve_keys(anchors, NULL);
    for (int i = 0; i < n; i++) {
        const double x = offsets[i] == offsetof(struct trn_hyp, anchors) ? nearbyint(v[i]) : v[i];
        memcpy((char *)h + offsets[i], &x, sizeof x);
    }
}

void trn_evolve_constrain(double *v, bool anchors)
{
    const int n = trn_evolve_keys(anchors, NULL);
    for (int i = 0; i < n; i++) {
        double x = fmin(fmax(v[i], keys[i].lo), keys[i].hi);
        v[i] = nearbyint(x * 1e5) / 1e5;
    }
}

void trn_evolve_mutate(const double *rows, int n_rows, bool anchors, uint64_t seed,
                       uint32_t generation, double *v)
{
    const int n = trn_evolve_keys(anchors, NULL), w = TRN_EVOLVE_RESULT + n;
    struct trn_rng r;
    trn_rng_init(&r, seed, generation, 0, TRN_STREAM_EVOLVE);
    /* the top min(5, rows) by fitness (np.argsort(-fitness): ties keep the file's order) */
    int top[5], k = 0;
    for (; k < 5 && k < n_rows; k++) {
        int best = -1;
        for (int i = 0; i < n_rows; i++) {
            bool used = false;
            for (int j = 0; j < k; j++)
                used |= top[j] == i;
            if (!used && (best < 0 || trn_evolve_fitness(rows + (size_t)i * w) >
                                          trn_evolve_fitness(rows + (size_t)best * w)))
                best = i;
        }
        top[k] = best;
    }
    double wt[5], lo = INFINITY, total = 0;
    for (int j = 0; j < k; j++)
        lo = fmin(lo, trn_evolve_fitness(rows + (size_t)top[j] * w));
    for (int j = 0; j < k; j++)
        total += wt[j] = trn_evolve_fitness(rows + (size_t)top[j] * w) - lo + 1e-6;
    /* random.choices(range(n), weights=w)[0]: bisect_right on the cumulative weights */
    const double x = trn_rng_uniform(&r) * total;
    int pick = 0;
    for (double cum = wt[0]; pick < k - 1 && x >= cum; cum += wt[++pick])
        ;
    const double *parent = rows + (size_t)top[pick] * w + TRN_EVOLVE_RESULT;
    double m[TRN_EVOLVE_MAX];
    bool changed = false;
    while (!changed) {
        /* train.py: v = (g * (random(ng) < mp) * randn(ng) * random() * s + 1).clip(0.3, 3.0) */
        double u[TRN_EVOLVE_MAX], z[TRN_EVOLVE_MAX];
        for (int i = 0; i < n; i++)
            u[i] = trn_rng_uniform(&r);
        for (int i = 0; i < n; i++)
            z[i] = trn_rng_normal(&r);
        const double s = trn_rng_uniform(&r);
        for (int i = 0; i < n; i++) {
            m[i] = fmin(fmax(keys[i].gain * (u[i] < 0.8) * z[i] * s * 0.2 + 1, 0.3), 3.0);
            changed |= m[i] != 1;
        }
    }
    for (int i = 0; i < n; i++)
        v[i] = parent[i] * m[i];
}

static const char *key_name(int col, bool anchors)
{
    (void)anchors;
    return col < TRN_EVOLVE_RESULT ? result_keys[col] : keys[col - TRN_EVOLVE_RESULT].name;
}

int trn_evolve_csv_parse(const char *text, size_t len, const char *name, bool anchors,
                         double **rows, int *n_rows, char *err, size_t err_cap)
{
    *rows = NULL;
    *n_rows = 0;
    const int w = TRN_EVOLVE_RESULT + trn_evolve_keys(anchors, NULL);
    int rc = 0, lineno = 0, nr = 0, room = 0;
    double *t = NULL;
    char field[64];
    for (size_t at = 0; rc == 0 && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (lineno > 1 && nr == room) {
            if (room >= 1000000) { /* a million generations: not an evolve.csv */
                rc = -EFBIG;
                break;
            }
            room = room ? 2 * room : 64;
            double *g = realloc(t, (size_t)room * (size_t)w * sizeof *g);
            if (!g) {
                rc = -ENOMEM;
                break;
            }
            t = g;
        }
        int col = 0;
        for (size_t p = at; rc == 0 && p <= end; col++) {
            const char *c = memchr(text + p, ',', end - p);
            const size_t fe = c ? (size_t)(c - text) : end;
            if (col >= w || fe - p >= sizeof field || memchr(text + p, '\0', fe - p)) {
                rc = -EINVAL;
                break;
            }
            memcpy(field, text + p, fe - p);
            field[fe - p] = '\0';
            trn_trim(field);
            if (lineno == 1) {
                if (strcmp(field, key_name(col, anchors))) rc = -EINVAL;
            } else {
                char *e;
                const double v = strtod(field, &e);
                if (e == field || *e || !isfinite(v)) rc = -EINVAL;
                t[(size_t)nr * w + col] = v;
            }
            p = fe + 1;
        }
        if (rc == 0 && col != w) rc = -EINVAL;
        if (rc == 0 && lineno > 1) nr++;
        at = end + 1;
    }
    if (rc < 0) {
        free(t);
        return trn_fail(err, err_cap, rc, "%s:%d: %s", name, lineno,
                        rc == -ENOMEM  ? "out of memory"
                        : rc == -EFBIG ? "more than a million generations"
                        : lineno == 1  ? "its columns are not this run's (results, then the "
                                         "evolved hyperparameters in train.py's order)"
                                       : "not a row of finite numbers");
    }
    *rows = t;
    *n_rows = nr;
    return 0;
}

int trn_evolve_csv_read(const char *dir, bool anchors, double **rows, int *n_rows, char *err,
                        size_t err_cap)
{
    *rows = NULL;
    *n_rows = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/evolve.csv", dir);
    char *text = NULL;
    size_t len = 0;
    char e[512] = "";
    const int rc = trn_read_file(path, 64u << 20, &text, &len, e, sizeof e);
    if (rc == -ENOENT) return 0;
    if (rc < 0) return trn_fail(err, err_cap, rc, "%s", e);
    const int prc = trn_evolve_csv_parse(text, len, path, anchors, rows, n_rows, err, err_cap);
    free(text);
    return prc;
}

/* yaml.safe_dump's float: Python's repr (the shortest that reads back), '.0' on whole numbers,
 * '.0e' for an exponent without a point. */
static void yaml_float(char *buf, size_t cap, double x)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".e") && isfinite(x)) {
        strncat(buf, ".0", cap - strlen(buf) - 1);
    } else if (strchr(buf, 'e') && !strchr(buf, '.')) {
        char tmp[64];
        const char *e = strchr(buf, 'e');
        snprintf(tmp, sizeof tmp, "%.*s.0%s", (int)(e - buf), buf, e);
        snprintf(buf, cap, "%s", tmp);
    }
}

int trn_evolve_record(const char *dir, bool anchors, const double results[TRN_EVOLVE_RESULT],
                      const double *v, char *msg, size_t msg_cap, char *err, size_t err_cap)
{
    const int n = trn_evolve_keys(anchors, NULL), w = TRN_EVOLVE_RESULT + n;
    char path[4200];
    snprintf(path, sizeof path, "%s/evolve.csv", dir);
    FILE *f = fopen(path, "r");
    const bool fresh = !f;
    if (f) fclose(f);
    if (!(f = fopen(path, "a")))
        return trn_fail(err, err_cap, -errno, "%s: %s", path, strerror(errno));
    double vals[TRN_EVOLVE_RESULT + TRN_EVOLVE_MAX];
    memcpy(vals, results, TRN_EVOLVE_RESULT * sizeof *vals);
    memcpy(vals + TRN_EVOLVE_RESULT, v, (size_t)n * sizeof *vals);
    for (int c = 0; fresh && c < w; c++)
        fprintf(f, "%20s%s", key_name(c, anchors), c + 1 < w ? "," : "\n");
    for (int c = 0; c < w; c++)
        fprintf(f, "%20.5g%s", vals[c], c + 1 < w ? "," : "\n");
    if (fclose(f) != 0) return trn_fail(err, err_cap, -EIO, "%s: write failed", path);

    double *rows = NULL;
    int nr = 0;
    int rc = trn_evolve_csv_read(dir, anchors, &rows, &nr, err, err_cap);
    if (rc < 0) return rc;
    int best = 0; /* np.argmax: the first maximum */
    for (int i = 1; i < nr; i++)
        if (trn_evolve_fitness(rows + (size_t)i * w) > trn_evolve_fitness(rows + (size_t)best * w))
            best = i;
    snprintf(path, sizeof path, "%s/hyp_evolve.yaml", dir);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w"))) {
        free(rows);
        return trn_fail(err, err_cap, -errno, "%s: %s", tmp, strerror(errno));
    }
    fprintf(f,
            "# YOLOv5 Hyperparameter Evolution Results\n# Best generation: %d\n"
            "# Last generation: %d\n# ",
            best, nr - 1);
    for (int c = 0; c < TRN_EVOLVE_RESULT; c++)
        fprintf(f, "%20s%s", result_keys[c], c + 1 < TRN_EVOLVE_RESULT ? ", " : "\n# ");
    for (int c = 0; c < TRN_EVOLVE_RESULT; c++)
        fprintf(f, "%20.5g%s", rows[(size_t)best * w + c],
                c + 1 < TRN_EVOLVE_RESULT ? ", " : "\n\n");
    for (int i = 0; i < n; i++) {
        char num[64];
        yaml_float(num, sizeof num, rows[(size_t)best * w + TRN_EVOLVE_RESULT + i]);
        fprintf(f, "%s: %s\n", keys[i].name, num);
    }
    free(rows);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return trn_fail(err, err_cap, -EIO, "%s: write failed", path);
    }
    if (msg && msg_cap) {
        size_t at = (size_t)snprintf(msg, msg_cap,
                                     "evolve: %d generations finished, current "
                                     "result:\nevolve: ",
                                     nr);
        for (int c = 0; c < w && at < msg_cap; c++)
            at += (size_t)snprintf(msg + at, msg_cap - at, "%20s%s", key_name(c, anchors),
                                   c + 1 < w ? ", " : "\nevolve: ");
        for (int c = 0; c < w && at < msg_cap; c++)
            at += (size_t)snprintf(msg + at, msg_cap - at, "%20.5g%s", vals[c],
                                   c + 1 < w ? ", " : "");
    }
    return 0;
}

int trn_evolve_plot(const char *dir, bool anchors, char *msg, size_t msg_cap, char *err,
                    size_t err_cap)
{
    double *rows = NULL;
    int nr = 0;
    int rc = trn_evolve_csv_read(dir, anchors, &rows, &nr, err, err_cap);
    if (rc < 0) return rc;
    const int n = trn_evolve_keys(anchors, NULL), w = TRN_EVOLVE_RESULT + n;
    if (nr < 1) {
        free(rows);
        return trn_fail(err, err_cap, -EINVAL, "%s/evolve.csv: no generation", dir);
    }
    double *f = malloc((size_t)nr * sizeof *f), *v = malloc((size_t)nr * n * sizeof *v);
    const char *names[TRN_EVOLVE_MAX];
    if (!f || !v) {
        free(rows), free(f), free(v);
        return trn_fail(err, err_cap, -ENOMEM, "evolve.png: out of memory");
    }
    int best = 0;
    for (int i = 0; i < nr; i++) {
        f[i] = trn_evolve_fitness(rows + (size_t)i * w);
        memcpy(v + (size_t)i * n, rows + (size_t)i * w + TRN_EVOLVE_RESULT, (size_t)n * sizeof *v);
        if (f[i] > f[best]) best = i;
    }
    for (int k = 0; k < n; k++)
        names[k] = keys[k].name;
    char png[4200];
    snprintf(png, sizeof png, "%s/evolve.png", dir);
    rc = trn_plot_evolve(names, n, v, f, nr, png, err, err_cap);
    if (rc == 0 && msg && msg_cap) {
        size_t at =
            (size_t)snprintf(msg, msg_cap, "Best results from row %d of %s/evolve.csv:", best, dir);
        for (int k = 0; k < n && at < msg_cap; k++)
            at += (size_t)snprintf(msg + at, msg_cap - at, "\n%15s: %.3g", names[k],
                                   v[(size_t)best * n + k]);
        if (at < msg_cap) snprintf(msg + at, msg_cap - at, "\nSaved %s", png);
    }
    free(rows), free(f), free(v);
    return rc;
}
