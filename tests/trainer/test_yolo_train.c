/*
 * yolo-train, the program: its flags, --summary, bad flags, training's command-line errors,
 * --bench-data --json and --plot with ultralytics' run directories, on a small dataset made
 * with yolo-synth and yolo-pack.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>

#include "run_testutil.h"
#include "tap.h"

static const char *train;

/* The whole file as a string (malloc'd), or NULL. */
static char *out_text(const char *which)
{
    char p[300];
    snprintf(p, sizeof p, "%s/%s.txt", dir, which);
    return slurp(p, NULL);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static void test_help_and_flags(void)
{
    is_int(run("%s --help", train), 0, "--help exits 0");
    char *o = out_text("stdout");
    static const char *const flags[] = {
        "--records",     "--val-records", "--cfg",      "--weights", "--img",        "--batch-size",
        "--epochs",      "--hyp",         "--device",   "--resume",  "--seed",       "--project",
        "--name",        "--workers",     "--nc",       "--summary", "--bench-data", "--seconds",
        "--json",        "--plot",        "--exist-ok", "--cos-lr",  "--optimizer",  "--patience",
        "--save-period", "--noval",       "--nosave",
    };
    int missing = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        if (!o || !strstr(o, flags[k])) {
            missing++;
            tap_diag("--help lacks %s", flags[k]);
        }
    is_int(missing, 0, "--help lists all %zu flags", sizeof flags / sizeof flags[0]);
    ok(o && strstr(o, "SGD") && strstr(o, "AdamW"), "--help names the optimizers");
    free(o);

    is_int(run("%s --cfg yolov5s.yaml --summary", train), 0, "--cfg yolov5s.yaml --summary");
    o = out_text("stdout");
    ok(o && strstr(o, "YOLOv5s summary: 214 layers, 7235389 parameters"),
       "prints the YOLOv5s summary line");
    free(o);
    is_int(run("%s --cfg yolov5s --nc 3 --summary", train), 0, "--nc 3 --summary");
    o = out_text("stdout");
    ok(o && strstr(o, "YOLOv5s summary: 214 layers, ") && !strstr(o, "7235389 parameters"),
       "--nc changes the parameter count");
    free(o);

    static const char *const bad[] = {
        "--bogus",  "--img abc", "--optimizer RMSprop", "--batch-size 0", "--device gpu",
        "--epochs", "--json=1",  "--seconds -1",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const int rc = run("%s --records x.ffr %s", train, bad[k]);
        char *e = out_text("stderr");
        ok(rc == 2 && count_lines(e) == 2 && strstr(e, "hint:"),
           "bad flag '%s': exit 2, one error line and a hint (rc %d)", bad[k], rc);
        free(e);
    }
    is_int(run("%s --summary", train), 2, "--summary without --cfg is a usage error");
    is_int(run("%s --cfg nosuchmodel --summary", train), 1, "an unknown model is exit 1");

    char ffr[300];
    snprintf(ffr, sizeof ffr, "%s/train.ffr", dir);
    /* training itself is tests/trainer/test_train_run.c; here only its command-line errors */
    is_int(run("%s --records %s --img 320 --epochs 1", train, ffr), 2,
           "training without --cfg or --resume: exit 2");
    char *e = out_text("stderr");
    ok(e && strstr(e, "--cfg"), "... saying it needs --cfg");
    free(e);
    is_int(run("%s --records %s/missing.ffr --cfg yolov5n --img 320 --epochs 1 --project %s/runs",
               train, dir, dir),
           1, "training on a missing dataset: exit 1");
    e = out_text("stderr");
    ok(e && strstr(e, "missing.ffr"), "... naming the file");
    free(e);
}

static void test_bench(void)
{
    const int rc = run("%s --records %s/train.ffr --bench-data --json --seconds 1 --workers 1 "
                       "--batch-size 4 --img 320",
                       train, dir);
    is_int(rc, 0, "--bench-data --json exits 0");
    char *o = out_text("stdout");
    cJSON *j = o ? cJSON_Parse(o) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "images_per_s");
    ok(cJSON_IsObject(j) && cJSON_IsNumber(v) && v->valuedouble > 0,
       "prints a JSON object with images_per_s > 0 (%.*s)", o ? (int)strcspn(o, "\n") : 0,
       o ? o : "");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "mosaic");
    ok(cJSON_IsNumber(m) && m->valuedouble == 1.0, "at full augmentation (mosaic 1)");
    cJSON_Delete(j);
    free(o);
    is_int(run("%s --records %s/missing.ffr --bench-data --seconds 1", train, dir), 1,
           "--bench-data on a missing file: exit 1");
}

/* The "compute: ..." line a run printed (stdout or stderr; malloc'ed), or NULL. */
static char *compute_line(void)
{
    char *r = NULL;
    for (int k = 0; k < 2 && !r; k++) {
        char *e = out_text(k ? "stderr" : "stdout");
        char *l = e ? strstr(e, "compute: ") : NULL;
        r = l ? strndup(l, strcspn(l, "\n")) : NULL;
        free(e);
    }
    return r;
}

/* The defaults use the compute threads of --threads N for N = the CPUs this process may use,
 * with BLAS single-threaded, in --bench, the training loop and yolo-val: checked by counting
 * threads (issue 25: OpenBLAS's own threads beside ours halved --bench's speed). */
static void test_default_threads(const char *yolo_val)
{
    cpu_set_t set;
    const int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    const char *bench = "%s --bench --cfg yolov5n --img 64 --batch-size 2 --bench-steps 1 "
                        "--bench-warmup 1 --device cpu --json%s";
    char with_n[32];
    snprintf(with_n, sizeof with_n, " --threads %d", n);
    int counts[2][3] = { { -1, -1, -1 }, { -2, -2, -2 } };
    for (int k = 0; k < 2; k++) {
        if (run(bench, train, k ? with_n : "") != 0) continue;
        char *o = out_text("stdout");
        cJSON *j = o ? cJSON_Parse(o) : NULL;
        static const char *const keys[3] = { "threads", "blas_threads", "os_threads" };
        for (int q = 0; q < 3; q++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[q]);
            if (cJSON_IsNumber(v)) counts[k][q] = v->valueint;
        }
        cJSON_Delete(j);
        free(o);
    }
    ok(!memcmp(counts[0], counts[1], sizeof counts[0]) && counts[0][0] == n &&
           (n == 1 || counts[0][1] == 1),
       "--bench: default threads %d, BLAS %d, %d in the process == --threads %d's (%d, %d, %d)",
       counts[0][0], counts[0][1], counts[0][2], n, counts[1][0], counts[1][1], counts[1][2]);

    const char *tr = "%s --records %s/train.ffr --cfg yolov5n --img 320 --batch-size 4 --epochs 1 "
                     "--workers 1 --stop-after-steps 1 --project %s/runs --name thr%d "
                     "--exist-ok%s";
    char *line[2] = { NULL, NULL };
    for (int k = 0; k < 2; k++)
        if (run(tr, train, dir, dir, k, k ? with_n : "") == 0) line[k] = compute_line();
    char want[64];
    snprintf(want, sizeof want, "compute: %d thread(s) per op, BLAS %d", n, n > 1 ? 1 : n);
    ok(line[0] && line[1] && !strcmp(line[0], line[1]) && !strncmp(line[0], want, strlen(want)),
       "training: the default's '%s' == --threads %d's", line[0] ? line[0] : "(none)", n);
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s/runs/thr0/weights/last.ckpt", dir);
    const char *va = "%s --records %s/train.ffr --weights %s --img 320 --device cpu --workers 1 "
                     "--no-plots --project %s/runs --name val --exist-ok%s";
    char *vline[2] = { NULL, NULL };
    for (int k = 0; k < 2 && line[0]; k++)
        if (run(va, yolo_val, dir, ckpt, dir, k ? with_n : "") == 0) vline[k] = compute_line();
    ok(vline[0] && vline[1] && !strcmp(vline[0], vline[1]) &&
           !strncmp(vline[0], want, strlen(want)),
       "yolo-val: the default's '%s' == --threads %d's", vline[0] ? vline[0] : "(none)", n);
    for (int k = 0; k < 2; k++) {
        free(line[k]);
        free(vline[k]);
    }
}

/* --page-cache and --direct reach the training loader: with MemAvailable made tiny the loader
 * would read with O_DIRECT and say so; --page-cache keeps the page cache (no such line), and
 * with MemAvailable made huge --direct still reads with O_DIRECT (no "page cache" line). */
static void test_read_flags(void)
{
    const char *tr = "TRN_LOADER_TEST_MEM_AVAILABLE=%s %s --records %s/train.ffr --cfg yolov5n "
                     "--img 64 --batch-size 4 --epochs 1 --workers 1 --stop-after-steps 1 "
                     "--noval --noplots --project %s/runs --name rd --exist-ok %s";
    static const struct {
        const char *mem, *flag, *want, *not_want;
    } c[] = {
        { "1000", "", "reading it with O_DIRECT", NULL },
        { "1000", "--page-cache", NULL, "O_DIRECT" },
        { "1000000000000", "", "reading it through the page cache", NULL },
        { "1000000000000", "--direct", NULL, "page cache" },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        const int rc = run(tr, c[k].mem, train, dir, dir, c[k].flag);
        char *o = out_text("stdout"), *e = out_text("stderr");
        const bool has = c[k].want && ((o && strstr(o, c[k].want)) || (e && strstr(e, c[k].want)));
        const bool bad =
            c[k].not_want && ((o && strstr(o, c[k].not_want)) || (e && strstr(e, c[k].not_want)));
        ok(rc == 0 && (c[k].want ? has : !bad), "MemAvailable %s bytes %s: %s%s (exit %d)",
           c[k].mem, c[k].flag, c[k].want ? "says " : "never mentions ",
           c[k].want ? c[k].want : c[k].not_want, rc);
        free(o);
        free(e);
    }
}

/* Decodes path; returns 1 when it is a whole JPEG of w x h. */
static int jpeg_is(const char *path, int w, int h)
{
    size_t n = 0;
    char *s = slurp(path, &n);
    if (!s) return 0;
    tjhandle tj = tjInitDecompress();
    int jw = 0, jh = 0, sub, cs, good = 0;
    if (tj && tjDecompressHeader3(tj, (unsigned char *)s, n, &jw, &jh, &sub, &cs) == 0 && jw == w &&
        jh == h) {
        unsigned char *rgb = malloc((size_t)jw * (size_t)jh * 3);
        good = rgb && tjDecompress2(tj, (unsigned char *)s, n, rgb, jw, 0, jh, TJPF_RGB, 0) == 0;
        free(rgb);
    }
    if (!good) tap_diag("%s: %dx%d, want %dx%d", path, jw, jh, w, h);
    if (tj) tjDestroy(tj);
    free(s);
    return good;
}

static int exists(const char *fmt, const char *a)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, fmt, dir, a);
    return stat(p, &st) == 0;
}

static void test_plot(void)
{
    /* 4 images of 320 -> a 2 x 2 grid of 640 x 640 (scale 3 > 1: no resize). */
    is_int(run("cd %s && %s --records train.ffr --plot --batch-size 4 --img 320 --workers 1", dir,
               train),
           0, "--plot exits 0");
    char p[512];
    int good = 0;
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/runs/train/exp/train_batch%d.jpg", dir, k);
        good += jpeg_is(p, 640, 640);
    }
    is_int(good, 3, "train_batch0..2.jpg in runs/train/exp decode as 640x640 JPEGs");
    is_int(run("%s --records %s/train.ffr --plot --batch-size 9 --img 320 --workers 1 "
               "--project %s/runs/train",
               train, dir, dir),
           0, "a second --plot run");
    snprintf(p, sizeof p, "%s/runs/train/exp2/train_batch0.jpg", dir);
    ok(jpeg_is(p, 960, 960), "... goes to exp2 (9 images: 3 x 3 cells of 320)");
    is_int(run("%s --records %s/train.ffr --plot --batch-size 4 --img 320 --workers 1 "
               "--project %s/runs/train --name exp --exist-ok",
               train, dir, dir),
           0, "--exist-ok run");
    ok(!exists("%s/runs/train/exp3%s", ""), "--exist-ok reuses exp (no exp3)");
    is_int(run("%s --records %s/train.ffr --plot --batch-size 4 --img 320 --workers 1 "
               "--project %s/runs/custom --name trial",
               train, dir, dir),
           0, "--project/--name run");
    ok(exists("%s/runs/custom/trial/%s", "train_batch2.jpg"), "writes to PROJECT/NAME");
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        printf("usage: test_yolo_train YOLO_TRAIN YOLO_SYNTH YOLO_PACK\n");
        return 99;
    }
    static char train_abs[4096];
    /* absolute: one run starts in the dataset folder (default --project runs/train) */
    if (!realpath(argv[1], train_abs)) return 99;
    train = train_abs;
    snprintf(dir, sizeof dir, "/tmp/test_yolo_train_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    const int made =
        run("%s %s/synth --split train2017=12 --seed 7 --min-side 48 --max-side 200 "
            "--format yolo --classes 4 --max-objects 5",
            argv[2], dir) == 0 &&
        run("%s %s/synth/synth.yaml -o %s/train.ffr --size 320 -q -j 1", argv[3], dir, dir) == 0;
    if (!ok(made, "yolo-synth and yolo-pack made the dataset in %s", dir)) return tap_done();
    test_help_and_flags();
    test_bench();
    test_default_threads(argc > 4 ? argv[4] : NULL);
    test_plot();
    test_read_flags();
    const int rc = tap_done();
    if (rc == 0) run("rm -rf %s", dir);
    return rc;
}
