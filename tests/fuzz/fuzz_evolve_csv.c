/*
 * Fuzz target: the evolve.csv reader (trainer/train/evolve.c trn_evolve_csv_parse), with and
 * without the anchors column. Whatever the input, a parse either fails with an error line naming
 * the file or yields rows of finite numbers; it never crashes, and the rows go through the
 * parent selection and mutation, whose values stay finite.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "evolve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int a = 0; a < 2; a++) {
        double *rows = NULL;
        int nr = -1;
        char err[256] = "";
        const int rc = trn_evolve_csv_parse((const char *)data, size, "fuzz.csv", a, &rows, &nr,
                                            err, sizeof err);
        if (rc < 0) {
            if (strncmp(err, "fuzz.csv:", 9) != 0 || rows || nr != 0) abort();
            continue;
        }
        const int w = TRN_EVOLVE_RESULT + trn_evolve_keys(a, NULL);
        for (size_t i = 0; i < (size_t)nr * (size_t)w; i++)
            if (!isfinite(rows[i])) abort();
        if (nr > 0) {
            double v[TRN_EVOLVE_MAX];
            trn_evolve_mutate(rows, nr, a, 1, 0, v);
            trn_evolve_constrain(v, a);
            for (int i = 0; i < w - TRN_EVOLVE_RESULT; i++)
                if (!isfinite(v[i])) abort();
        }
        free(rows);
    }
    return 0;
}
