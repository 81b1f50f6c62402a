/*
 * Every CUDA op against its CPU reference: the parity suites of parity.h, run from one table
 * over one harness (cuda_testutil.h). Usage:
 *   test_cuda_ops [--suite NAME]... [--seed N] [--bench] [--list]
 * Without --suite every suite runs; --list prints the suite names (no device needed). Without a
 * CUDA device: exit 77, "# SKIP no CUDA device" (meson's exit-code protocol reads a skip).
 */
#define TESTS_DEFINE_STATE
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kern.h"
#include "kern_cuda.h"
#include "kern_testutil.h"
#include "tap.h"
#include "cuda_testutil.h"
#include "parity.h"

static const struct {
    const char *name;
    void (*run)(int bench);
} suites[] = {
    { "ops", parity_ops },         { "optim", parity_optim },   { "yolo_loss", parity_yolo_loss },
    { "augment", parity_augment }, { "graph", parity_graph },   { "conv_lowp", parity_conv_lowp },
    { "resadd", parity_resadd },   { "stride", parity_stride }, { "sgd_lowp", parity_sgd_lowp },
    { "bnx", parity_bnx },
};
#define N_SUITES (sizeof suites / sizeof suites[0])

int main(int argc, char **argv)
{
    bool want[N_SUITES] = { false }, any = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) {
            for (size_t k = 0; k < N_SUITES; k++)
                printf("%s\n", suites[k].name);
            return 0;
        }
        if (strcmp(argv[i], "--suite")) continue;
        size_t k = 0;
        while (k < N_SUITES && (i + 1 >= argc || strcmp(argv[i + 1], suites[k].name)))
            k++;
        if (k == N_SUITES) {
            printf("Bail out! --suite %s: no such suite (--list names them)\n",
                   i + 1 < argc ? argv[i + 1] : "(missing)");
            return 2;
        }
        want[k] = any = true;
        i++;
    }
    const int bench = kct_start(argc, argv);
    for (size_t k = 0; k < N_SUITES; k++) {
        if (any && !want[k]) continue;
        tap_diag("suite %s", suites[k].name);
        suites[k].run(bench);
    }
    kct_end();
    return tap_done();
}
