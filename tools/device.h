/*
 * device: --device as val.py and detect.py take it (select_device): "cpu" or one CUDA device
 * number; absent means device 0 when one is visible. Shared by yolo-val and yolo-detect
 * (yolo-train takes a list of devices for its ranks).
 */
#ifndef TOOL_DEVICE_H
#define TOOL_DEVICE_H

#include <stddef.h>

/* An argparse AP_CALL: v must be "cpu" or 0..63; *(const char **)dst = v. Returns 0 or -EINVAL
 * with the reason in why. */
int tool_parse_device(const char *v, void *dst, char *why, size_t cap);

/* --cpu-engine E (auto, onednn or reference) as net.h's enum trn_cpu_engine; the argparse
 * table row below checks the choice; NULL (no flag) is auto. */
int tool_cpu_engine(const char *e);

/* The --cpu-engine row of an argparse table (argparse.h), its value into *where (const char *). */
#define TOOL_CPU_ENGINE_OPT(where)                                                             \
    {                                                                                          \
        .names = "--cpu-engine", .kind = AP_CHOICE, .dst = (where), .metavar = "E",            \
        .help = "what runs the CPU's convolutions: auto (default: oneDNN where the build has " \
                "it and it has JIT code for every conv; else the reference ops), onednn, or "  \
                "reference (our ops, bit for bit the reference); in yolo-train for the "       \
                "training step and the validation",                                            \
        .choices = "auto|onednn|reference"                                                     \
    }

/*
 * How OpenMP's threads (oneDNN's, net.h trn_cpu_engine) wait between parallel regions: called
 * first in main, it sets GOMP_SPINCOUNT=5000 and OMP_WAIT_POLICY=PASSIVE and re-executes the
 * program when neither is set (libgomp reads them once, when it is loaded, before main): a
 * short spin, then sleep. libgomp's default spin (300000 rounds) takes the cores from the
 * loader's workers and our own pool: a 640 epoch on 2 cores with a zstd pack ran at 4.98 img/s
 * on oneDNN against 5.38 on the reference ops, 5.80 with PASSIVE. Sleeping at once (PASSIVE
 * alone) costs a futex wake at each of the step's ~900 regions: the yolov5n 320 b16 step took
 * 362 ms against 324 with the short spin, and a coco128 epoch ran 5-8% slower
 * (docs/benchmarks.md). A value the user set is kept. Returns only when it did not re-execute.
 */
void tool_omp_wait(char **argv);

/* The device d names: -1 for the CPU, the CUDA device number, or -2 after printing (prefixed
 * with prog) that the asked-for device is not there. d NULL: 0 when a device is visible. */
int tool_pick_device(const char *prog, const char *d);

#endif
