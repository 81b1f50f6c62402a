/*
 * det's label table: built from real files' index summaries, it holds exactly what each record's
 * summary holds (sizes, rows, CSR offsets, the most rows); an empty dataset gives an empty table;
 * and a summary that does not parse, or one det_summary_check refuses, stops it with an error
 * naming the file and the record (one rule for every consumer).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "det.h"
#include "ffr.h"
#include "tap.h"
#include "testutil.h"

/* Writes n records to path: record i has 1 + i % 4 labels (0 for every fifth), sizes from i.
 * bad >= 0: that record's summary is replaced by bad_sum (bad_len bytes). */
static int write_set(const char *path, int n, int bad, const void *bad_sum, size_t bad_len)
{
    struct ffr_writer *w;
    if (ffr_writer_open(&w, path, NULL) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        float rows[5 * 4];
        const uint32_t nl = i % 5 == 4 ? 0 : 1 + (uint32_t)i % 4;
        for (uint32_t q = 0; q < nl; q++) {
            rows[5 * q] = (float)((i + q) % 80);
            rows[5 * q + 1] = 0.5f, rows[5 * q + 2] = 0.25f + 0.125f * q;
            rows[5 * q + 3] = 0.1f * (q + 1), rows[5 * q + 4] = 0.05f * (i % 7 + 1);
        }
        uint8_t px[3 * 2 * 2] = { 0 };
        const struct det_sample s = { .h = 2,
                                      .w = 2,
                                      .h0 = 100 + i,
                                      .w0 = 200 + 2 * i,
                                      .pixel_format = DET_RGB8,
                                      .pixels = px,
                                      .pixel_bytes = sizeof px,
                                      .n_labels = nl,
                                      .labels = rows,
                                      .image_id = i };
        uint8_t rec[512], sum[256];
        const int64_t rl = det_encode(&s, rec, sizeof rec);
        const int64_t sl = det_summary_encode(&s, sum, sizeof sum);
        if (rl < 0 || sl < 0) rc = -1;
        if (rc == 0)
            rc = i == bad ? ffr_writer_append(w, rec, (size_t)rl, bad_sum, bad_len)
                          : ffr_writer_append(w, rec, (size_t)rl, sum, (size_t)sl);
    }
    if (rc == 0) return ffr_writer_close(w);
    ffr_writer_abort(w);
    return rc;
}

static void table_matches(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/good.ffr", dir);
    const int n = 23;
    ok(write_set(path, n, -1, NULL, 0) == 0, "wrote %d records", n);
    struct ffr_reader *r = NULL;
    char err[400] = "";
    ok(ffr_reader_open(&r, path, NULL, err, sizeof err) == 0, "opened (%s)", err);
    struct det_labels *t = NULL;
    int rc = det_labels_build(r, path, &t, err, sizeof err);
    ok(rc == 0 && t && t->n == (uint64_t)n, "built (%d %s)", rc, err);
    int same = 1;
    uint32_t most = 0;
    for (uint64_t i = 0; t && same && i < t->n; i++) {
        struct ffr_record_info ri;
        struct det_summary s;
        same = ffr_reader_info(r, i, &ri) == 0 &&
               det_summary_decode(ri.summary, ri.summary_len, &s) == 0 && t->image[i].h == s.h &&
               t->image[i].w == s.w && t->image[i].h0 == s.h0 && t->image[i].w0 == s.w0 &&
               t->first[i + 1] - t->first[i] == s.n_labels &&
               !memcmp(t->rows[i], s.labels, 20 * (size_t)s.n_labels);
        if (s.n_labels > most) most = s.n_labels;
    }
    ok(same, "every image's sizes and rows equal its summary's");
    ok(t && t->first[0] == 0 && t->first[n] == 46 && t->max_rows == most && most == 4,
       "CSR offsets run from 0 to the 46 rows; max_rows %u", t ? t->max_rows : 0);
    det_labels_free(t);
    ffr_reader_close(r);

    snprintf(path, sizeof path, "%s/empty.ffr", dir);
    ok(write_set(path, 0, -1, NULL, 0) == 0 &&
           ffr_reader_open(&r, path, NULL, err, sizeof err) == 0,
       "an empty dataset");
    ok(det_labels_build(r, NULL, &t, err, sizeof err) == 0 && t->n == 0 && t->first[0] == 0 &&
           t->max_rows == 0,
       "gives an empty table");
    det_labels_free(t);
    ffr_reader_close(r);
}

static void refuses(const char *dir, const char *name, const void *sum, size_t len,
                    const char *expect, const char *what)
{
    char path[600], err[400] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct ffr_reader *r = NULL;
    if (write_set(path, 9, 6, sum, len) < 0 ||
        ffr_reader_open(&r, path, NULL, err, sizeof err) < 0) {
        ok(0, "%s: could not write or open the file (%s)", what, err);
        return;
    }
    struct det_labels *t = (struct det_labels *)1;
    const int rc = det_labels_build(r, path, &t, err, sizeof err);
    char want[700];
    snprintf(want, sizeof want, "%s: record 6: %s", path, expect);
    ok(rc == -FFR_ECORRUPT && !t && strstr(err, want) == err, "%s: '%s'", what, err);
    ffr_reader_close(r);
}

static void bad_summaries(const char *dir)
{
    const uint8_t three[3] = { 1, 2, 3 };
    refuses(dir, "short.ffr", three, sizeof three, "index summary does not parse",
            "a 3-byte summary");
    /* a summary whose box is outside the image: what ffr verify and the loader refuse */
    float row[5] = { 3, 1.5f, 0.5f, 0.1f, 0.1f };
    uint8_t sum[40];
    const uint32_t head[5] = { 2, 2, 100, 200, 1 };
    memcpy(sum, head, 20);
    memcpy(sum + 20, row, 20);
    refuses(dir, "box.ffr", sum, sizeof sum, "", "a box centre at x = 1.5");
    const uint32_t zero[5] = { 0, 2, 100, 200, 0 };
    refuses(dir, "h0.ffr", zero, sizeof zero, "", "a stored height of 0");
}

int main(void)
{
    const char *dir = tu_tmpdir();
    if (!dir) return tap_skip_all("no temporary directory"), 0;
    table_matches(dir);
    bad_summaries(dir);
    tu_rmtree(dir);
    return tap_done();
}
