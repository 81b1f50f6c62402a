/*
 * The `ffr` tool end to end: builds small detection datasets with the ffr library (one file,
 * sharded, damaged, with a summary that lies), runs the built binary on them (its path is
 * argv[1]) and checks what it prints, writes and exits with against the samples it was given.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <png.h>
#include <turbojpeg.h>

#include "det.h"
#include "ffr.h"
#include "tap.h"

extern char **environ;

static const char *ffr_bin;
static char tmp[256];

/* ------------------------------------------------------------------------------------------ */
/* Samples                                                                                    */

#define N_SAMPLES 6
#define N_CLASSES 3

struct sample {
    struct det_sample s;
    uint8_t *rgb; /* plain RGB8 (what export must reproduce); for JPEG the decoded source */
    uint8_t *jpeg;
    float labels[3 * 5];
    uint32_t seg_counts[3];
    float seg_points[16];
};

static struct sample samples[N_SAMPLES];

static const char *const class_names[N_CLASSES] = { "person", "say \"hi\" \xc3\xbc", "car" };
static const char metadata[] = "encoding: ffr-det-1\n"
                               "names:\n"
                               "  - person\n"
                               "  - 'say \"hi\" \xc3\xbc'\n"
                               "  - car\n"
                               "size: 64\n"
                               "split: test\n";

static void gradient(uint8_t *p, uint32_t h, uint32_t w, unsigned seed)
{
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(x * 255 / (w - 1));
            q[1] = (uint8_t)(y * 255 / (h - 1));
            q[2] = (uint8_t)(seed * 40 + x + y);
        }
}

static void set_label(struct sample *m, uint32_t j, float c, float cx, float cy, float w, float h)
{
    float *l = m->labels + 5 * j;
    l[0] = c;
    l[1] = cx;
    l[2] = cy;
    l[3] = w;
    l[4] = h;
    m->s.n_labels = j + 1;
    m->s.labels = m->labels;
}

/* 0: RGB8, two labels. 1: RGB8-SUB, a name with a directory. 2: a background. 3: segments (one
 * label without a polygon). 4: noise (stays raw under zstd), a name with a newline and a byte
 * that is not UTF-8. 5: JPEG, no name. */
static int make_samples(void)
{
    static const uint32_t hw[N_SAMPLES][2] = { { 48, 64 }, { 40, 56 }, { 32, 32 },
                                               { 48, 48 }, { 64, 64 }, { 32, 48 } };
    static const char *const names[N_SAMPLES] = { "000000000009.jpg", "train/img_1.png",
                                                  "background.jpg",   "seg.jpg",
                                                  "noi\nse\xff.jpg",  "" };
    for (int k = 0; k < N_SAMPLES; k++) {
        struct sample *m = &samples[k];
        const uint32_t h = hw[k][0], w = hw[k][1];
        m->rgb = malloc((size_t)h * w * 3);
        if (!m->rgb) return -1;
        gradient(m->rgb, h, w, (unsigned)k);
        m->s.h = h;
        m->s.w = w;
        m->s.h0 = h * 10;
        m->s.w0 = w * 10 + (uint32_t)k;
        m->s.pixel_format = k == 1 ? DET_RGB8_SUB : DET_RGB8;
        m->s.pixels = m->rgb;
        m->s.pixel_bytes = h * w * 3;
        m->s.image_id = k == 5 ? -1 : 1000 + k;
        m->s.name = names[k];
        m->s.name_len = (uint32_t)strlen(names[k]);
    }
    set_label(&samples[0], 0, 0, 0.5f, 0.5f, 0.5f, 0.5f);
    set_label(&samples[0], 1, 2, 0.25f, 0.3f, 0.2f, 0.2f);
    set_label(&samples[1], 0, 1, 0.4f, 0.6f, 0.3f, 0.4f);
    struct sample *g = &samples[3];
    set_label(g, 0, 0, 0.5f, 0.5f, 0.4f, 0.4f);
    set_label(g, 1, 1, 0.2f, 0.2f, 0.1f, 0.1f);
    set_label(g, 2, 0, 0.7f, 0.7f, 0.2f, 0.2f);
    static const float pts[14] = { 0.3f, 0.3f, 0.7f, 0.3f, 0.7f, 0.7f, 0.3f,
                                   0.7f, 0.6f, 0.6f, 0.8f, 0.6f, 0.7f, 0.8f };
    memcpy(g->seg_points, pts, sizeof pts);
    g->seg_counts[0] = 4;
    g->seg_counts[1] = 0;
    g->seg_counts[2] = 3;
    g->s.n_points = 7;
    g->s.seg_counts = g->seg_counts;
    g->s.seg_points = g->seg_points;
    struct sample *n = &samples[4];
    uint32_t x = 12345;
    for (uint32_t j = 0; j < n->s.pixel_bytes; j++) {
        x = x * 1103515245u + 12345u;
        n->rgb[j] = (uint8_t)(x >> 16);
    }
    set_label(n, 0, 2, 0.5f, 0.5f, 1.0f, 1.0f);
    struct sample *j = &samples[5];
    tjhandle tj = tjInitCompress();
    unsigned long len = 0;
    if (!tj || tjCompress2(tj, j->rgb, (int)j->s.w, 0, (int)j->s.h, TJPF_RGB, &j->jpeg, &len,
                           TJSAMP_420, 90, 0) != 0)
        return -1;
    tjDestroy(tj);
    j->s.pixel_format = DET_JPEG;
    j->s.pixels = j->jpeg;
    j->s.pixel_bytes = (uint32_t)len;
    set_label(j, 0, 1, 0.5f, 0.5f, 0.5f, 0.5f);
    return 0;
}

/* Writes the samples; `lie` >= 0 gives that record a summary with the wrong height. */
static int write_dataset(const char *path, uint64_t shard_bytes, int lie)
{
    struct ffr_writer_opts o;
    ffr_writer_opts_default(&o);
    o.codec = FFR_CODEC_ZSTD;
    o.align = 4096;
    o.shard_bytes = shard_bytes;
    o.durable = 0;
    struct ffr_writer *w;
    int rc = ffr_writer_open(&w, path, &o);
    if (rc < 0) return rc;
    for (int k = 0; k < N_SAMPLES && rc >= 0; k++) {
        const struct det_sample *s = &samples[k].s;
        const size_t n = det_encoded_size(s);
        uint8_t *buf = malloc(n);
        uint8_t sum[256];
        int64_t e = buf ? det_encode(s, buf, n) : -ENOMEM;
        int64_t sn = det_summary_encode(s, sum, sizeof sum);
        if (k == lie) sum[0] ^= 1; /* h, little-endian */
        if (e >= 0 && sn >= 0)
            rc = ffr_writer_append(w, buf, (size_t)e, sum, (size_t)sn);
        else
            rc = -EINVAL;
        free(buf);
    }
    if (rc >= 0) rc = ffr_writer_set_metadata(w, metadata, strlen(metadata));
    if (rc < 0) {
        ffr_writer_abort(w);
        return rc;
    }
    return ffr_writer_close(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Running the tool                                                                           */

struct run {
    int code;  /* exit status, or 128 + signal */
    char *out; /* stdout, NUL-terminated */
    size_t out_len;
    char *err; /* stderr */
};

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap + 1);
    size_t got;
    while (p && (got = fread(p + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *q = realloc(p, 2 * cap + 1);
            if (!q) {
                free(p);
                p = NULL;
                break;
            }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) p[n] = '\0';
    if (len) *len = n;
    return p;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

/* Runs ffr with the given arguments (NULL-terminated), capturing stdout and stderr. */
static struct run ffr(const char *first, ...)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = ffr_bin;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char out_path[300], err_path[300];
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct run r = { .code = -1 };
    pid_t pid;
    if (posix_spawn(&pid, ffr_bin, &fa, NULL, (char *const *)argv, environ) == 0) {
        int st;
        if (waitpid(pid, &st, 0) == pid)
            r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    posix_spawn_file_actions_destroy(&fa);
    r.out = slurp(out_path, &r.out_len);
    r.err = slurp(err_path, NULL);
    if (!r.out) r.out = calloc(1, 1);
    if (!r.err) r.err = calloc(1, 1);
    return r;
}

static int count_lines(const char *s, int skip_comments)
{
    int n = 0;
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        if (!skip_comments || *p != '#') n++;
        if (!nl) break;
        p = nl + 1;
    }
    return n;
}

/* The number after "key" at the start of a line, or -1. */
static long long field(const char *text, const char *key)
{
    const size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, k) == 0) return strtoll(p + k, NULL, 10);
    return -1;
}

static char *path_in(const char *name)
{
    static char buf[4][400];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmp, name);
    return p;
}

static int flip_byte(const char *path, uint64_t off)
{
    const int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    uint8_t b;
    int rc = pread(fd, &b, 1, (off_t)off) == 1 ? 0 : -1;
    b ^= 0x40;
    if (rc == 0) rc = pwrite(fd, &b, 1, (off_t)off) == 1 ? 0 : -1;
    close(fd);
    return rc;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* ------------------------------------------------------------------------------------------ */
/* Checks                                                                                     */

static void check_info(const char *file, int want_shards)
{
    struct run r = ffr("info", file, NULL);
    is_int(r.code, 0, "info %s exits 0", file);
    is_int(field(r.out, "records:"), N_SAMPLES, "info: records");
    is_int(field(r.out, "shards:"), want_shards, "info: shards");
    is_int(field(r.out, "backgrounds:"), 1, "info: one background");
    ok(strstr(r.out, "  encoding: ffr-det-1\n") != NULL, "info: prints the metadata text");
    run_free(&r);

    struct ffr_reader *rd;
    if (ffr_reader_open(&rd, file, NULL, NULL, 0) < 0) {
        ok(0, "library opens %s", file);
        return;
    }
    uint64_t stored = 0, raw = 0, bytes = 0, codecs[2] = { 0, 0 };
    for (uint64_t i = 0; i < ffr_reader_count(rd); i++) {
        struct ffr_record_info ri;
        ffr_reader_info(rd, i, &ri);
        stored += ri.stored_len;
        raw += ri.raw_len;
        codecs[ri.codec == FFR_CODEC_ZSTD]++;
    }
    for (uint32_t k = 0; k < ffr_reader_shard_count(rd); k++) {
        struct ffr_shard_info sh;
        ffr_reader_shard(rd, k, &sh);
        bytes += sh.file_size;
    }
    ffr_reader_close(rd);
    struct stat st;
    if (want_shards > 1 && stat(file, &st) == 0) bytes += (uint64_t)st.st_size;

    r = ffr("info", "--json", file, NULL);
    is_int(r.code, 0, "info --json exits 0");
    cJSON *j = cJSON_Parse(r.out);
    ok(j != NULL, "info --json parses");
    ok(strchr(r.out, '\n') == r.out + r.out_len - 1, "info --json is one line");
    cJSON *c = cJSON_GetObjectItem(j, "records");
    is_int(cJSON_IsNumber(c) ? c->valuedouble : -1, N_SAMPLES, "json records");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "shards")), want_shards, "json shards");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes")), bytes, "json bytes");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "stored_bytes")), stored, "json stored");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "raw_bytes")), raw, "json raw");
    const double ratio = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ratio"));
    ok(fabs(ratio - (double)raw / (double)stored) < 1e-3, "json ratio %.3f", ratio);
    cJSON *cod = cJSON_GetObjectItem(j, "codecs");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(cod, "raw")), codecs[0], "json raw records");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(cod, "zstd")), codecs[1], "json zstd records");
    ok(codecs[0] >= 1 && codecs[1] >= 1, "the dataset has both raw and zstd records");
    is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "backgrounds")), 1, "json backgrounds");
    const char *meta = cJSON_GetStringValue(cJSON_GetObjectItem(j, "metadata"));
    ok(meta && strcmp(meta, metadata) == 0, "json metadata is the metadata text");
    /* Label counts recomputed from the samples themselves. */
    uint64_t want[N_CLASSES] = { 0 };
    for (int k = 0; k < N_SAMPLES; k++)
        for (uint32_t l = 0; l < samples[k].s.n_labels; l++)
            want[(int)samples[k].labels[5 * l]]++;
    cJSON *cls = cJSON_GetObjectItem(j, "classes");
    is_int(cJSON_GetArraySize(cls), N_CLASSES, "json: %d classes", N_CLASSES);
    for (int k = 0; k < N_CLASSES; k++) {
        cJSON *e = cJSON_GetArrayItem(cls, k);
        is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "id")), k, "class %d id", k);
        is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "labels")), want[k], "class %d labels",
               k);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        ok(name && strcmp(name, class_names[k]) == 0, "class %d name '%s'", k, name ? name : "");
    }
    cJSON_Delete(j);
    run_free(&r);
}

static void check_cat(const char *file)
{
    struct ffr_reader *rd;
    if (ffr_reader_open(&rd, file, NULL, NULL, 0) < 0) {
        ok(0, "open %s", file);
        return;
    }
    const uint64_t n = ffr_reader_count(rd);
    for (long long i = -1; i < (long long)n; i++) {
        const uint64_t rec = i < 0 ? n - 1 : (uint64_t)i;
        struct ffr_record_info ri;
        ffr_reader_info(rd, rec, &ri);
        uint8_t *want = malloc(ri.raw_len + 1);
        const int64_t got = ffr_reader_read(rd, NULL, rec, want, ri.raw_len + 1);
        char arg[32];
        snprintf(arg, sizeof arg, "%lld", i);
        struct run r = ffr("cat", file, arg, NULL);
        ok(r.code == 0 && got >= 0 && r.out_len == (size_t)got &&
               memcmp(r.out, want, (size_t)got) == 0,
           "cat %s %s: the record's bytes", file, arg);
        free(want);
        run_free(&r);
    }
    ffr_reader_close(rd);
}

static int near(double a, double b)
{
    return fabs(a - b) <= 6e-7;
}

/* Reads a txt file of rows, checking each against the expected numbers. */
static int rows_equal(const char *path, const float *const *rows, const int *lens, int n_rows)
{
    char *t = slurp(path, NULL);
    if (!t) return 0;
    int good = 1, row = 0;
    char *save = NULL;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save), row++) {
        if (row >= n_rows) {
            good = 0;
            break;
        }
        char *p = line, *end;
        const long cls = strtol(p, &end, 10);
        if (end == p || *end != ' ' || cls != (long)rows[row][0]) good = 0;
        p = end;
        for (int k = 1; k < lens[row] && good; k++) {
            const double v = strtod(p, &end);
            if (end == p || !near(v, rows[row][k])) good = 0;
            p = end;
        }
        if (*p) good = 0;
    }
    free(t);
    return good && row == n_rows;
}

static int ppm_equal(const char *path, const uint8_t *rgb, uint32_t h, uint32_t w)
{
    size_t n;
    char *p = slurp(path, &n);
    char head[64];
    const int hl = snprintf(head, sizeof head, "P6\n%u %u\n255\n", w, h);
    const int good = p && n == (size_t)hl + (size_t)h * w * 3 && memcmp(p, head, (size_t)hl) == 0 &&
                     memcmp(p + hl, rgb, (size_t)h * w * 3) == 0;
    free(p);
    return good;
}

/* Decodes a PNG to RGB8 (malloc'd) with libpng's simplified API. */
static uint8_t *read_png(const char *path, uint32_t *h, uint32_t *w)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, path)) return NULL;
    im.format = PNG_FORMAT_RGB;
    uint8_t *buf = malloc(PNG_IMAGE_SIZE(im));
    if (!buf || !png_image_finish_read(&im, NULL, buf, 0, NULL)) {
        png_image_free(&im);
        free(buf);
        return NULL;
    }
    *h = im.height;
    *w = im.width;
    return buf;
}

static void check_export(const char *file)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/export", tmp);
    /* 0: RGB8 to PPM, rows are boxes. */
    struct run r = ffr("export", file, "0", "-o", dir, NULL);
    is_int(r.code, 0, "export 0 exits 0");
    char img[500], txt[500];
    snprintf(img, sizeof img, "%s/000000000009.ppm", dir);
    snprintf(txt, sizeof txt, "%s/000000000009.txt", dir);
    ok(strstr(r.out, img) && strstr(r.out, txt), "export prints the paths it wrote");
    ok(ppm_equal(img, samples[0].rgb, samples[0].s.h, samples[0].s.w),
       "export 0: PPM pixels equal the sample's");
    const float *rows0[2] = { samples[0].labels, samples[0].labels + 5 };
    const int lens0[2] = { 5, 5 };
    ok(rows_equal(txt, rows0, lens0, 2), "export 0: txt rows equal the labels");
    run_free(&r);

    /* 1: RGB8-SUB to PNG, named after the file without its directory. */
    r = ffr("export", file, "1", "-o", dir, "--format", "png", NULL);
    is_int(r.code, 0, "export 1 --format png exits 0");
    snprintf(img, sizeof img, "%s/img_1.png", dir);
    uint32_t h = 0, w = 0;
    uint8_t *px = read_png(img, &h, &w);
    ok(px && h == samples[1].s.h && w == samples[1].s.w &&
           memcmp(px, samples[1].rgb, (size_t)h * w * 3) == 0,
       "export 1: PNG pixels equal the sample's (Sub filter undone)");
    free(px);
    run_free(&r);

    /* 2: a background gets an empty txt. */
    r = ffr("export", file, "2", "-o", dir, NULL);
    snprintf(txt, sizeof txt, "%s/background.txt", dir);
    size_t n = 99;
    char *t = slurp(txt, &n);
    ok(r.code == 0 && t && n == 0, "export 2: a background's txt is empty");
    free(t);
    run_free(&r);

    /* 3: segments: polygon rows; the label without a polygon becomes its box's corners. */
    r = ffr("export", file, "3", "-o", dir, NULL);
    is_int(r.code, 0, "export 3 exits 0");
    const struct sample *g = &samples[3];
    float row0[9], row1[9], row2[7];
    row0[0] = g->labels[0];
    memcpy(row0 + 1, g->seg_points, 8 * sizeof(float));
    const float *b = g->labels + 5;
    const float corners[9] = { b[0],
                               b[1] - b[3] / 2,
                               b[2] - b[4] / 2,
                               b[1] + b[3] / 2,
                               b[2] - b[4] / 2,
                               b[1] + b[3] / 2,
                               b[2] + b[4] / 2,
                               b[1] - b[3] / 2,
                               b[2] + b[4] / 2 };
    memcpy(row1, corners, sizeof row1);
    row2[0] = g->labels[10];
    memcpy(row2 + 1, g->seg_points + 8, 6 * sizeof(float));
    const float *rows3[3] = { row0, row1, row2 };
    const int lens3[3] = { 9, 9, 7 };
    snprintf(txt, sizeof txt, "%s/seg.txt", dir);
    ok(rows_equal(txt, rows3, lens3, 3), "export 3: segment rows");
    run_free(&r);
    r = ffr("export", file, "3", "-o", dir, "--boxes", NULL);
    const float *rows3b[3] = { g->labels, g->labels + 5, g->labels + 10 };
    const int lens3b[3] = { 5, 5, 5 };
    ok(r.code == 0 && rows_equal(txt, rows3b, lens3b, 3), "export 3 --boxes: box rows");
    run_free(&r);

    /* 4: a name that is not a safe file name: named after the record number. */
    r = ffr("export", file, "4", "-o", dir, NULL);
    snprintf(img, sizeof img, "%s/4.ppm", dir);
    ok(r.code == 0 && ppm_equal(img, samples[4].rgb, samples[4].s.h, samples[4].s.w),
       "export 4: unsafe name, written as 4.ppm");
    run_free(&r);

    /* -1: JPEG stored as is; no name, so named after the record number. */
    r = ffr("export", file, "-1", "-o", dir, "--format", "png", NULL);
    is_int(r.code, 0, "export -1 exits 0");
    snprintf(img, sizeof img, "%s/5.jpg", dir);
    t = slurp(img, &n);
    ok(t && n == samples[5].s.pixel_bytes && memcmp(t, samples[5].jpeg, n) == 0,
       "export -1: the JPEG bytes as stored, as 5.jpg");
    free(t);
    run_free(&r);
}

static void check_show(const char *file)
{
    const char *jpg = path_in("show.jpg");
    struct run r = ffr("show", file, "0", "-o", jpg, NULL);
    is_int(r.code, 0, "show 0 -o show.jpg exits 0");
    size_t n;
    char *t = slurp(jpg, &n);
    tjhandle tj = tjInitDecompress();
    int w = 0, h = 0, sub, cs;
    ok(t && tj && tjDecompressHeader3(tj, (unsigned char *)t, n, &w, &h, &sub, &cs) == 0 &&
           w == (int)samples[0].s.w && h == (int)samples[0].s.h,
       "show writes a decodable JPEG of the image's size (%dx%d)", w, h);
    uint8_t *rgb = t && w > 0 && h > 0 ? malloc((size_t)w * (size_t)h * 3) : NULL;
    ok(rgb && tjDecompress2(tj, (unsigned char *)t, n, rgb, w, 0, h, TJPF_RGB, 0) == 0,
       "the JPEG decodes");
    free(rgb);
    if (tj) tjDestroy(tj);
    free(t);
    run_free(&r);

    const char *png = path_in("show.png");
    r = ffr("show", file, "0", "-o", png, NULL);
    is_int(r.code, 0, "show 0 -o show.png exits 0");
    uint32_t ph = 0, pw = 0;
    uint8_t *px = read_png(png, &ph, &pw);
    ok(px && ph == samples[0].s.h && pw == samples[0].s.w, "show writes a PNG of the right size");
    if (px) {
        /* Label 0 is class 0: its bottom edge (the stroke straddles it) is drawn in the
         * palette's FF3838. The middle of the edge: the name tags sit at the top left. */
        const float *l = samples[0].labels;
        const uint32_t x = (uint32_t)lround(l[1] * pw);
        const uint32_t y = (uint32_t)lround((l[2] + l[4] / 2) * ph) - 1;
        const uint8_t *p = px + ((size_t)y * pw + x) * 3;
        ok(p[0] == 0xff && p[1] == 0x38 && p[2] == 0x38,
           "box edge in class 0's colour (%02x%02x%02x)", p[0], p[1], p[2]);
        /* Far from every box the image is untouched. */
        const uint8_t *q = px + ((size_t)(ph - 1) * pw + (pw - 1)) * 3;
        const uint8_t *o = samples[0].rgb + ((size_t)(ph - 1) * pw + (pw - 1)) * 3;
        ok(memcmp(q, o, 3) == 0, "pixels away from the boxes are the image's");
    }
    free(px);
    run_free(&r);
    r = ffr("show", file, "-1", "-o", png, NULL);
    px = read_png(png, &ph, &pw);
    ok(r.code == 0 && px && ph == samples[5].s.h && pw == samples[5].s.w,
       "show draws a JPEG record");
    free(px);
    run_free(&r);
    r = ffr("show", file, "3", "-o", png, NULL);
    is_int(r.code, 0, "show draws a record with segments");
    run_free(&r);
}

static void check_ls(const char *file)
{
    struct run r = ffr("ls", file, NULL);
    is_int(r.code, 0, "ls exits 0");
    is_int(count_lines(r.out, 1), N_SAMPLES, "ls: one line per record");
    is_int(count_lines(r.out, 0), N_SAMPLES + 1, "ls: and a # header");
    ok(strstr(r.out, "000000000009.jpg") && strstr(r.out, "train/img_1.png") &&
           strstr(r.out, " 48x64 "),
       "ls shows names and sizes");
    ok(strstr(r.out, "  noi?se\xef\xbf\xbd.jpg\n") != NULL,
       "ls: a control character becomes '?', a bad UTF-8 byte U+FFFD");
    run_free(&r);
    r = ffr("ls", "--limit", "2", file, NULL);
    ok(r.code == 0 && count_lines(r.out, 1) == 2, "ls --limit 2: two lines");
    run_free(&r);
}

static void expect_usage(const char *why, struct run r)
{
    ok(r.code == 2 && r.out_len == 0 && strncmp(r.err, "ffr", 3) == 0 && strstr(r.err, "--help") &&
           count_lines(r.err, 0) == 2,
       "bad arguments (%s): exit 2, an error line and a hint line", why);
    if (r.code != 2) tap_diag("exit %d, stderr: %s", r.code, r.err);
    run_free(&r);
}

static void check_arguments(const char *file)
{
    /* URLs are read remotely now (tests/tools/test_ffr_s3.sh); one nobody serves is named. */
    struct run u = ffr("info", "http://127.0.0.1:9/x.ffr", NULL);
    ok(u.code == 1 && strstr(u.err, "http://127.0.0.1:9/x.ffr") && strstr(u.err, "onnect") &&
           !strstr(u.err, "No such file"),
       "info on a URL nobody serves: exit 1 naming the URL and the refused connection: %s", u.err);
    run_free(&u);
    expect_usage("no command", ffr(NULL));
    expect_usage("unknown command", ffr("frobnicate", NULL));
    expect_usage("info without FILE", ffr("info", NULL));
    expect_usage("info with two files", ffr("info", file, file, NULL));
    expect_usage("unknown option", ffr("info", "--bogus", file, NULL));
    expect_usage("cat without N", ffr("cat", file, NULL));
    expect_usage("cat N not a number", ffr("cat", file, "1x", NULL));
    expect_usage("cat N past the end", ffr("cat", file, "6", NULL));
    expect_usage("cat N before the start", ffr("cat", file, "-7", NULL));
    expect_usage("export without -o", ffr("export", file, "0", NULL));
    expect_usage("export bad --format",
                 ffr("export", file, "0", "-o", tmp, "--format", "gif", NULL));
    expect_usage("show bad extension", ffr("show", file, "0", "-o", path_in("x.bmp"), NULL));
    expect_usage("show bad quality",
                 ffr("show", file, "0", "-o", path_in("x.jpg"), "--quality", "0", NULL));
    expect_usage("ls bad --limit", ffr("ls", file, "--limit", "many", NULL));
    expect_usage("verify --limit without value", ffr("verify", file, "--limit", NULL));
    expect_usage("flag with a value", ffr("verify", "--json=yes", file, NULL));
    static const char *const cmds[] = { "info", "verify", "ls", "cat", "export", "show" };
    for (int k = 0; k < 6; k++) {
        struct run r = ffr(cmds[k], "--help", NULL);
        char want[32];
        snprintf(want, sizeof want, "usage: ffr %s", cmds[k]);
        ok(r.code == 0 && strncmp(r.out, want, strlen(want)) == 0, "%s --help", cmds[k]);
        run_free(&r);
    }
    struct run r = ffr("--help", NULL);
    ok(r.code == 0 && strstr(r.out, "ffr export"), "ffr --help lists the commands");
    run_free(&r);

    /* File errors: exit 1 and a line naming the file. */
    const char *missing = path_in("missing.ffr");
    r = ffr("info", missing, NULL);
    ok(r.code == 1 && strstr(r.err, missing) && count_lines(r.err, 0) == 1,
       "info on a missing file: exit 1, one line naming it");
    run_free(&r);
    const char *text = path_in("text.ffr");
    FILE *f = fopen(text, "w");
    if (f) {
        fputs("not a record file at all, just some text that is long enough\n", f);
        fclose(f);
    }
    r = ffr("verify", text, NULL);
    ok(r.code == 1 && strstr(r.err, text), "verify on a non-ffr file: exit 1 naming it");
    run_free(&r);
    r = ffr("verify", "--json", text, NULL);
    cJSON *j = cJSON_Parse(r.out);
    ok(r.code == 1 && j && cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")),
       "verify --json on a non-ffr file: ok false");
    cJSON_Delete(j);
    run_free(&r);
}

static void check_verify_good(const char *file)
{
    struct run r = ffr("verify", file, NULL);
    ok(r.code == 0 && strncmp(r.out, "ok: 6 records", 13) == 0, "verify %s: exit 0, ok", file);
    if (r.code) tap_diag("%s%s", r.out, r.err);
    run_free(&r);
    r = ffr("verify", "-q", file, NULL);
    ok(r.code == 0 && r.out_len == 0, "verify -q: silent when intact");
    run_free(&r);
    r = ffr("verify", "--json", file, NULL);
    cJSON *j = cJSON_Parse(r.out);
    ok(r.code == 0 && j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")) &&
           cJSON_GetNumberValue(cJSON_GetObjectItem(j, "records")) == N_SAMPLES &&
           cJSON_GetNumberValue(cJSON_GetObjectItem(j, "problems")) == 0 &&
           cJSON_IsNull(cJSON_GetObjectItem(j, "first")),
       "verify --json: ok true, 6 records, 0 problems, first null");
    cJSON_Delete(j);
    run_free(&r);
}

/* Flips a byte inside record k's payload (in place: pass a disposable dataset) and checks that
 * verify and cat name the record and its shard. */
static void check_verify_flip(const char *file, uint64_t k)
{
    struct ffr_reader *rd;
    if (ffr_reader_open(&rd, file, NULL, NULL, 0) < 0) {
        ok(0, "open %s", file);
        return;
    }
    struct ffr_record_info ri;
    struct ffr_shard_info sh;
    ffr_reader_info(rd, k, &ri);
    ffr_reader_shard(rd, ri.shard, &sh);
    char victim[400];
    snprintf(victim, sizeof victim, "%s", sh.path);
    ffr_reader_close(rd);
    ok(flip_byte(victim, ri.offset + FFR_FRAME_HEADER_SIZE + ri.stored_len / 2) == 0,
       "flip a byte in record %llu's payload (shard %u)", (unsigned long long)k, ri.shard);
    struct run r = ffr("verify", file, NULL);
    char want[500];
    snprintf(want, sizeof want, "first bad record %llu in shard %u (%s)\n", (unsigned long long)k,
             ri.shard, victim);
    ok(r.code == 1 && strstr(r.out, want) && strstr(r.out, "\n1 problem\n"),
       "verify: exit 1, '%.*s', '1 problem'", (int)strlen(want) - 1, want);
    if (r.code != 1 || !strstr(r.out, want)) tap_diag("got: %s", r.out);
    run_free(&r);
    r = ffr("verify", "--json", file, NULL);
    cJSON *j = cJSON_Parse(r.out);
    cJSON *first = cJSON_GetObjectItem(j, "first");
    ok(r.code == 1 && j && cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")) &&
           cJSON_GetNumberValue(cJSON_GetObjectItem(j, "problems")) == 1 &&
           cJSON_GetNumberValue(cJSON_GetObjectItem(first, "record")) == (double)k &&
           cJSON_GetNumberValue(cJSON_GetObjectItem(first, "shard")) == ri.shard,
       "verify --json: ok false, 1 problem, first.record %llu", (unsigned long long)k);
    cJSON_Delete(j);
    run_free(&r);
    char arg[32];
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)k);
    r = ffr("cat", file, arg, NULL);
    char rec[48];
    snprintf(rec, sizeof rec, "record %llu", (unsigned long long)k);
    ok(r.code == 1 && r.out_len == 0 && strstr(r.err, rec) && strstr(r.err, victim),
       "cat of the damaged record: exit 1 naming the file and record");
    run_free(&r);
    /* info reads only the index, which is intact. */
    r = ffr("info", file, NULL);
    is_int(r.code, 0, "info still works: the index is intact");
    run_free(&r);
}

static void check_verify_summary_lie(void)
{
    const char *file = path_in("lie.ffr");
    ok(write_dataset(file, 0, 2) == 0, "write a dataset whose record 2 summary lies");
    struct run r = ffr("verify", file, NULL);
    ok(r.code == 1 && strstr(r.out, "record 2") && strstr(r.out, "index summary says h 33") &&
           strstr(r.out, "first bad record 2 in shard 0") && strstr(r.out, "\n1 problem\n"),
       "verify catches a summary that differs from its sample");
    if (r.code != 1) tap_diag("got: %s", r.out);
    run_free(&r);
}

/* What training refuses, verify refuses (issue 20: these passed verify and were trained on, or
 * made yolo-train refuse the whole dataset with a wrong hint): one bad field at a time, sample
 * and summary consistent, so only the shared det_check can catch it. */
static void check_verify_semantics(void)
{
    static const struct {
        int field; /* 1..4: label 0's cx, cy, w, h; 5: h0; 6: w0 */
        float v;
        uint32_t side;
        const char *says;
    } bad[] = {
        { 1, 1e30f, 0, "cx = 1e+30" },
        { 3, -5.0f, 0, "w = -5" },
        { 4, 3e38f, 0, "h = 3e+38" },
        { 5, 0, 0, "original height 0" },
        { 6, 0, 0xffffffffu, "original width 4294967295" },
    };
    const char *file = path_in("semantic.ffr");
    struct sample *m = &samples[0];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const struct sample keep = *m;
        float lab[5];
        memcpy(lab, m->labels, sizeof lab);
        if (bad[k].field <= 4) m->labels[bad[k].field] = bad[k].v;
        if (bad[k].field == 5) m->s.h0 = bad[k].side;
        if (bad[k].field == 6) m->s.w0 = bad[k].side;
        ok(write_dataset(file, 0, -1) == 0, "write a dataset whose record 0 has %s", bad[k].says);
        struct run r = ffr("verify", file, NULL);
        ok(r.code == 1 && strstr(r.out, "record 0") && strstr(r.out, bad[k].says) &&
               strstr(r.out, "training refuses"),
           "verify refuses %s", bad[k].says);
        if (r.code != 1 || !strstr(r.out, bad[k].says)) tap_diag("got: %s", r.out);
        run_free(&r);
        *m = keep;
        memcpy(m->labels, lab, sizeof lab);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_ffr_tool PATH_TO_FFR\n");
        return 99;
    }
    ffr_bin = argv[1];
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/ffrtool-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp) || make_samples() < 0) {
        fprintf(stderr, "setup failed: %s\n", strerror(errno));
        return 99;
    }
    const char *one = path_in("det.ffr");
    const char *sharded = path_in("sharded.ffr");
    ok(write_dataset(one, 0, -1) == 0, "write det.ffr");
    ok(write_dataset(sharded, 3 * 4096 + 8192, -1) == 0, "write sharded.ffr");
    struct ffr_reader *rd;
    uint32_t n_shards = 0;
    if (ffr_reader_open(&rd, sharded, NULL, NULL, 0) == 0) {
        n_shards = ffr_reader_shard_count(rd);
        ffr_reader_close(rd);
    }
    ok(n_shards >= 2, "sharded.ffr has %u shards", n_shards);

    check_info(one, 1);
    check_info(sharded, (int)n_shards);
    check_verify_good(one);
    check_verify_good(sharded);
    check_ls(one);
    check_ls(sharded);
    check_cat(one);
    check_cat(sharded);
    check_export(one);
    check_show(one);
    check_arguments(one);
    check_verify_summary_lie();
    check_verify_semantics();

    const char *bad = path_in("bad.ffr");
    ok(write_dataset(bad, 0, -1) == 0, "write bad.ffr");
    check_verify_flip(bad, 3);
    const char *bad_sh = path_in("badsh.ffr");
    ok(write_dataset(bad_sh, 3 * 4096 + 8192, -1) == 0, "write badsh.ffr");
    check_verify_flip(bad_sh, N_SAMPLES - 2);

    /* A missing shard: open fails naming the shard. */
    char shard1[400];
    snprintf(shard1, sizeof shard1, "%s/badsh-00001.ffr", tmp);
    ok(unlink(shard1) == 0, "remove shard 1");
    struct run r = ffr("verify", bad_sh, NULL);
    ok(r.code == 1 && strstr(r.err, "badsh-00001.ffr"), "verify: missing shard named");
    run_free(&r);

    /* FFR_TOOL_TEST_KEEP=1 keeps the files for a look (the show output, exports). */
    if (getenv("FFR_TOOL_TEST_KEEP"))
        tap_diag("kept %s", tmp);
    else
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    for (int k = 0; k < N_SAMPLES; k++) {
        free(samples[k].rgb);
        tjFree(samples[k].jpeg);
    }
    return tap_done();
}
