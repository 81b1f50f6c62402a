/* The model tests' models: a tiny one in text (two classes, five strided convs, Detect on the
 * last three), and models/NAME.yaml (TRN_TEST_MODELS_DIR) with nc classes (0: the yaml's); a
 * failure bails out of the TAP run. */
#ifndef MODEL_TESTUTIL_H
#define MODEL_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "model.h"

#include <string.h>

static inline const char *tu_tiny_yaml(size_t *len)
{
    static const char y[] = "nc: 2\n"
                            "depth_multiple: 0.33\n"
                            "width_multiple: 0.125\n"
                            "anchors:\n"
                            "  - [10,13, 16,30, 33,23]\n"
                            "  - [30,61, 62,45, 59,119]\n"
                            "  - [116,90, 156,198, 373,326]\n"
                            "backbone:\n"
                            "  [[-1, 1, Conv, [64, 6, 2, 2]],\n"
                            "   [-1, 1, Conv, [128, 3, 2]],\n"
                            "   [-1, 1, Conv, [256, 3, 2]],\n"
                            "   [-1, 1, Conv, [512, 3, 2]],\n"
                            "   [-1, 1, Conv, [1024, 3, 2]],\n"
                            "  ]\n"
                            "head:\n"
                            "  [[[2, 3, 4], 1, Detect, [nc, anchors]]]\n";
    *len = sizeof y - 1;
    return y;
}

#ifdef TRN_TEST_MODELS_DIR
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

#endif
