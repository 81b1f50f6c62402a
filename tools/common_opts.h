/*
 * The options several programs share, written once: their argparse rows (--cfg, --img, --weights,
 * --project / --name / --exist-ok, --device, --cpu-engine; the --data rows are data_pack.h's)
 * and what checks and reads them. --device is select_device's: "cpu", or CUDA device numbers
 * (0 or 0,1,2,3: yolo-train's local ranks take one each; yolo-val and yolo-detect the first);
 * absent or empty means device 0 when one is visible.
 */
#ifndef TOOL_COMMON_OPTS_H
#define TOOL_COMMON_OPTS_H

#include <signal.h>
#include <stddef.h>

#include "argparse.h"
#include "launch.h"

#ifndef TRN_MODELS_DIR
#define TRN_MODELS_DIR "models"
#endif

/* An argparse AP_CALL: v must be "cpu", empty, or a list of device numbers 0..63 ("0,1");
 * *(const char **)dst = v. Returns 0 or -EINVAL with the reason in why. */
int tool_parse_device(const char *v, void *dst, char *why, size_t cap);

/* clang-format off */
/* --cfg MODEL; what: how this program uses it (a sentence fragment after the lookup rule). */
#define TOOL_OPT_CFG(where_, what)                                                                    \
    AP_OPT("--cfg", AP_STR, (where_), "MODEL",                                                        \
           "model yaml: a path, or a name (yolov5n/s/m/l/x) looked up in $FFYOLO_MODELS_DIR, "     \
           "./models, " TRN_MODELS_DIR what)
/* --img N in [32, 16383]; what: what the size is for, with its default. */
#define TOOL_OPT_IMG(where_, what) AP_RANGE("--img|--imgsz|--img-size", AP_LONG, (where_), "N", what, 32, 16383)
/* --device D */
#define TOOL_OPT_DEVICE(where_)                                                                       \
    { .names = "--device", .kind = AP_CALL, .dst = (where_), .metavar = "D",                          \
      .help = "cpu, or CUDA devices: 0 or 0,1,2,3 (default: 0 if present; yolo-train's local "   \
              "ranks take one each, yolo-val and yolo-detect the first)",                          \
      .call = tool_parse_device }
/* --project DIR, --name NAME, --exist-ok; dflt: the program's default project ("runs/val"). */
#define TOOL_OPT_RUN_DIR(project, name, exist_ok, dflt)                                            \
    AP_OPT("--project", AP_STR, (project), "DIR", "save to DIR/NAME (default " dflt ")"),          \
    AP_OPT("--name", AP_STR, (name), "NAME", "run name (default exp; exp2, exp3, ... when taken)"), \
    AP_OPT("--exist-ok", AP_FLAG, (exist_ok), NULL, "reuse DIR/NAME instead of incrementing")
/* --weights W [W ...] into where_[0 .. max_), count in *n_; what: how this program uses them. */
#define TOOL_OPT_WEIGHTS(where_, n_, max_, what)                                                   \
    { .names = "--weights", .kind = AP_STRS, .dst = (where_), .metavar = "W [W ...]",              \
      .help = "ultralytics .pt, or our checkpoint (.ckpt); several: an ensemble" what,             \
      .max_n = (max_), .n = (n_) }
/* clang-format on */

/* --cpu-engine E (auto, onednn or reference) as net.h's enum trn_cpu_engine; the argparse
 * table row below checks the choice; NULL (no flag) is auto. */
int tool_cpu_engine(const char *e);

/* The --cpu-engine row of an argparse table (argparse.h), its value into *where (const char *). */
#define TOOL_OPT_CPU_ENGINE(where)                                                             \
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

/* trn_launch_opts.say for a program named ctx (a string): TRN_LAUNCH_OUT lines to stdout (flushed),
 * TRN_LAUNCH_ERR to stderr after "PROG: ", TRN_LAUNCH_USAGE as argparse's usage errors. */
void tool_say(void *ctx, enum trn_launch_say kind, const char *text);

/*
 * trn_launch_opts.stop_arm: SIGINT, SIGTERM and SIGUSR1 ask for a clean stop (the flag returned,
 * trn_train_opts.stop); a second SIGINT ends the process at once. Blocked in the threads created
 * afterwards and taken by a sigwait thread. Returns the flag, or NULL when the thread cannot
 * start.
 */
volatile sig_atomic_t *tool_stop_arm(void *ctx);

#endif /* TOOL_COMMON_OPTS_H */
