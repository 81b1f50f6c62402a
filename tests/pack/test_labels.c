/*
 * YOLO label text parsing and cleaning (pack/yolo_labels.c) against the rules of ultralytics
 * yolov5 v7.0 verify_image_label, on hand-written label files: good rows, bad values, ragged and
 * wrong column counts, duplicates (and the sorted order np.unique gives them), segment rows and
 * their boxes, line numbers, and the number grammar.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"
#include "tap.h"

static struct pack_lbl L;

static enum pack_lbl_status parse(const char *text, int64_t nc)
{
    if (pack_lbl_parse(&L, text, strlen(text), nc) != 0) {
        printf("# pack_lbl_parse failed (ENOMEM)\n");
        exit(99);
    }
    return L.status;
}

static bool row_is(size_t r, float c, float x, float y, float w, float h)
{
    const float *v = L.rows[r].v;
    const bool same = v[0] == c && v[1] == x && v[2] == y && v[3] == w && v[4] == h;
    if (!same)
        printf("#   row %zu: %g %g %g %g %g, want %g %g %g %g %g\n", r, (double)v[0], (double)v[1],
               (double)v[2], (double)v[3], (double)v[4], (double)c, (double)x, (double)y, (double)w,
               (double)h);
    return same;
}

static void test_good_rows(void)
{
    ok(parse("0 0.5 0.5 0.25 0.125\n45 0.1 0.2 0.3 0.4\n", -1) == PACK_LBL_OK, "good file is OK");
    is_int(L.n_rows, 2, "two rows");
    ok(row_is(0, 0, 0.5f, 0.5f, 0.25f, 0.125f), "row 0 values");
    /* numpy rounds str -> double -> float32 */
    ok(row_is(1, 45, (float)0.1, (float)0.2, (float)0.3, (float)0.4), "row 1 values");
    is_int(L.rows[1].line, 2, "row 1 is on line 2");

    ok(parse("", -1) == PACK_LBL_EMPTY, "empty file is a background");
    ok(parse(" \n\t\r\n  \n", -1) == PACK_LBL_EMPTY, "whitespace-only file is a background");

    /* CRLF, blank lines, tabs, leading blank lines: line numbers are physical lines */
    ok(parse("\r\n\r\n1\t0.5 0.5 0.5 0.5\r\n\r\n2 0.5 0.5 0.5 0.5\r\n", -1) == PACK_LBL_OK,
       "CRLF file with blank lines");
    is_int(L.n_rows, 2, "blank lines dropped");
    is_int(L.rows[0].line, 3, "first row on line 3");
    is_int(L.rows[1].line, 5, "second row on line 5");
    ok(parse("0 1 1 1 1\n0 0 0 0 0", -1) == PACK_LBL_OK, "bounds 0 and 1 are allowed");
    ok(parse("0 1.0e0 +.5 5e-1 0.", -1) == PACK_LBL_OK && row_is(0, 0, 1, 0.5f, 0.5f, 0),
       "Python float forms: exponent, sign, leading/trailing dot");
    ok(parse("-0 0.5 0.5 0.5 0.5", -1) == PACK_LBL_OK, "-0 passes >= 0 as in numpy");
}

static void test_bad_rows(void)
{
    ok(parse("0 0.5 0.5 0.5 0.5\n0 -0.1 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT,
       "negative coordinate rejects the file");
    is_int(L.bad_line, 2, "bad line is 2");
    is_int(L.n_in, 2, "both rows lost");
    ok(strstr(L.reason, "negative") != NULL, "reason says negative: %s", L.reason);

    ok(parse("0 0.5 0.5 0.5 1.0001\n", -1) == PACK_LBL_CORRUPT, "coordinate > 1 rejects");
    ok(strstr(L.reason, "out of bounds") != NULL, "reason: %s", L.reason);
    ok(parse("0 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "4 columns rejects");
    ok(strstr(L.reason, "5 columns, 4") != NULL, "reason: %s", L.reason);
    ok(parse("0 0.5 0.5 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "6 columns rejects");
    ok(parse("0 0.5 0.5 0.5 0.5\n1 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "ragged rejects");
    is_int(L.bad_line, 2, "ragged: line 2");
    ok(parse("0 0.5 0.5 0.5 0.5\n   \n1 0.5 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT,
       "a line of spaces is a row without values (ragged), as in Python");
    ok(parse("0 0.5 abc 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "non-numeric rejects");
    ok(strstr(L.reason, "'abc'") != NULL, "reason names the token: %s", L.reason);
    ok(parse("0 0.5 nan 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "nan rejects");
    ok(parse("0 0.5 inf 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "inf rejects");
    ok(parse("0 0.5 1e39 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "float32 overflow rejects");
    ok(parse("0 0.5 1_0 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "underscores reject");
    ok(parse("0 0x1p-1 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "hex floats reject");
    ok(parse("0 0.5 0.5 0.5 0.5\xc2\xa0\n", -1) == PACK_LBL_CORRUPT, "non-ASCII rejects");
    ok(parse("\xef\xbb\xbf"
             "0 0.5 0.5 0.5 0.5\n",
             -1) == PACK_LBL_CORRUPT,
       "UTF-8 BOM rejects (Python keeps it in the first token)");
    {
        static const char nul[] = "0 0.5 0.5\0 0.5 0.5\n";
        ok(pack_lbl_parse(&L, nul, sizeof nul - 1, -1) == 0 && L.status == PACK_LBL_CORRUPT,
           "embedded NUL rejects");
    }
    ok(parse("1.5 0.5 0.5 0.5 0.5\n", -1) == PACK_LBL_CORRUPT, "non-integer class rejects");
    ok(parse("80 0.5 0.5 0.5 0.5\n", 80) == PACK_LBL_CORRUPT, "class == nc rejects");
    ok(parse("79 0.5 0.5 0.5 0.5\n", 80) == PACK_LBL_OK, "class nc-1 accepted");
    ok(parse("80 0.5 0.5 0.5 0.5\n", -1) == PACK_LBL_OK, "class unchecked when nc unknown");
}

static void test_duplicates(void)
{
    /* no duplicates: file order kept */
    ok(parse("3 0.5 0.5 0.5 0.5\n1 0.2 0.2 0.2 0.2\n", -1) == PACK_LBL_OK, "no dups");
    ok(row_is(0, 3, 0.5f, 0.5f, 0.5f, 0.5f) && row_is(1, 1, 0.2f, 0.2f, 0.2f, 0.2f),
       "order kept when nothing is removed");
    is_int(L.n_dups, 0, "no duplicates reported");

    /* duplicates: np.unique order (sorted rows, first occurrence) */
    const char *t = "3 0.5 0.5 0.5 0.5\n"
                    "1 0.2 0.3 0.2 0.2\n"
                    "3 0.5 0.5 0.5 0.5\n"
                    "1 0.2 0.2 0.2 0.2\n"
                    "3 0.50 0.5 0.5 5e-1\n";
    ok(parse(t, -1) == PACK_LBL_OK, "file with duplicates is OK");
    is_int(L.n_rows, 3, "two duplicates removed");
    is_int(L.n_dups, 2, "two duplicates reported");
    ok(row_is(0, 1, 0.2f, 0.2f, 0.2f, 0.2f), "sorted: class 1, cy 0.2 first");
    ok(row_is(1, 1, 0.2f, 0.3f, 0.2f, 0.2f), "then class 1, cy 0.3");
    ok(row_is(2, 3, 0.5f, 0.5f, 0.5f, 0.5f), "then class 3");
    is_int(L.rows[2].line, 1, "the first occurrence is kept");
    ok(L.dups[0].line == 3 && L.dups[0].kept_line == 1, "dup line 3 of line 1");
    ok(L.dups[1].line == 5 && L.dups[1].kept_line == 1, "dup line 5 of line 1 (same float32)");
}

static void test_segments(void)
{
    /* one 7-column row makes the whole file a segment file */
    const char *t = "2 0.1 0.2 0.3 0.4 0.5 0.1\n"
                    "4 0.5 0.5 0.25 0.125\n";
    ok(parse(t, -1) == PACK_LBL_OK, "segment file OK");
    is_int(L.n_rows, 2, "two rows");
    const float x0 = 0.1f, x1 = 0.5f, y0 = 0.1f, y1 = 0.4f;
    ok(row_is(0, 2, (x0 + x1) / 2.0f, (y0 + y1) / 2.0f, x1 - x0, y1 - y0),
       "box = polygon bounds (float32)");
    is_int(L.rows[0].seg_n, 3, "3 polygon points kept");
    ok(L.pts[2 * L.rows[0].seg_off + 4] == 0.5f && L.pts[2 * L.rows[0].seg_off + 5] == 0.1f,
       "third point kept as written");
    /* the 5-column row of a segment file is read as the 2 points (cx,cy),(w,h), as ultralytics */
    ok(row_is(1, 4, (0.25f + 0.5f) / 2.0f, (0.125f + 0.5f) / 2.0f, 0.5f - 0.25f, 0.5f - 0.125f),
       "5-column row in a segment file is a 2-point polygon");
    is_int(L.rows[1].seg_n, 2, "2 points");

    ok(parse("2 0.1 0.2 0.3 0.4 0.5 0.1 0.7\n", -1) == PACK_LBL_CORRUPT, "odd polygon rejects");
    ok(parse("2 0.1 0.2 0.3 0.4 0.5 0.1\n3\n", -1) == PACK_LBL_CORRUPT,
       "class-only row in a segment file rejects");
    /* a point above 1 does not matter unless the box goes out (ultralytics checks the box) */
    ok(parse("2 0.5 0.2 1.2 0.4 0.6 0.3\n", -1) == PACK_LBL_OK,
       "point > 1 with an in-range box is accepted");
    ok(parse("2 0.9 0.2 0.95 0.4 1.2 0.3\n", -1) == PACK_LBL_CORRUPT,
       "point > 1 that pushes the box centre > 1 rejects");
    /* duplicates in a segment file: rows and polygons move together */
    ok(parse("2 0.1 0.1 0.3 0.1 0.3 0.3\n1 0.1 0.1 0.2 0.1 0.2 0.2\n2 0.1 0.1 0.3 0.3 0.3 0.1\n",
             -1) == PACK_LBL_OK,
       "segment duplicates (same box, other polygon)");
    is_int(L.n_rows, 2, "one removed (same class and box)");
    ok(L.rows[0].v[0] == 1 && L.rows[1].v[0] == 2, "sorted by class");
    ok(L.pts[2 * L.rows[1].seg_off + 2] == 0.3f && L.pts[2 * L.rows[1].seg_off + 3] == 0.1f,
       "kept row keeps its own polygon (first occurrence)");
}

static void test_numbers(void)
{
    static const char *const good[] = { "0",
                                        "-0",
                                        "+1",
                                        "1.",
                                        ".5",
                                        "1e5",
                                        "1E-5",
                                        "1e+05",
                                        "123.456e2",
                                        "0.000001",
                                        "3.14159265358979323846264338327950288",
                                        "1e-320",
                                        "1e308",
                                        "2.2250738585072011e-308",
                                        "9007199254740993",
                                        "0.1",
                                        "179769313486231570e290" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        double d = -1;
        const int rc = pack_ds_parse_number(good[i], strlen(good[i]), &d);
        const double want = strtod(good[i], NULL);
        ok(rc == 0 && (d == want || (isnan(d) && isnan(want))), "parse '%s' = %.17g (strtod %.17g)",
           good[i], d, want);
    }
    static const char *const bad[] = { "",    "+",     "-",        ".",   "e5",   "1e",
                                       "1e+", "1.2.3", "1 ",       " 1",  "0x10", "1_000",
                                       "1,5", "--1",   "infinite", "nanx" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double d;
        ok(pack_ds_parse_number(bad[i], strlen(bad[i]), &d) != 0, "reject '%s'", bad[i]);
    }
    double d;
    ok(pack_ds_parse_number("-Infinity", 9, &d) == 0 && isinf(d) && d < 0, "-Infinity");
    ok(pack_ds_parse_number("NaN", 3, &d) == 0 && isnan(d), "NaN");
    /* correctly rounded on random decimal strings: compare with glibc strtod */
    srand(7);
    int bad_round = 0;
    for (int i = 0; i < 20000; i++) {
        char s[64];
        const int digits = 1 + rand() % 19;
        int k = 0;
        if (rand() % 2) s[k++] = '-';
        for (int j = 0; j < digits; j++) {
            if (j == digits / 2) s[k++] = '.';
            s[k++] = (char)('0' + rand() % 10);
        }
        k += snprintf(s + k, sizeof s - (size_t)k, "e%d", rand() % 60 - 30);
        const double want = strtod(s, NULL);
        if (pack_ds_parse_number(s, (size_t)k, &d) != 0 || d != want) {
            if (bad_round++ < 3) printf("#   %s -> %.17g, strtod %.17g\n", s, d, want);
        }
    }
    is_int(bad_round, 0, "20000 random decimals round like strtod");
}

int main(void)
{
    test_good_rows();
    test_bad_rows();
    test_duplicates();
    test_segments();
    test_numbers();
    pack_lbl_free(&L);
    return tap_done();
}
