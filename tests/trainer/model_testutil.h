/* The model tests' loader: models/NAME.yaml (TRN_TEST_MODELS_DIR) with nc classes (0: the
 * yaml's); a failure bails out of the TAP run. */
#ifndef MODEL_TESTUTIL_H
#define MODEL_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "model.h"

static inline struct trn_model *tu_model_load(const char *name, int nc)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.yaml", TRN_TEST_MODELS_DIR, name);
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = nc;
    struct trn_model *m = NULL;
    char err[512] = "";
    if (trn_model_load(path, &o, &m, err, sizeof err)) {
        printf("Bail out! %s: %s\n", path, err);
        exit(99);
    }
    return m;
}

#endif
