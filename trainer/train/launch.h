/*
 * The yolo-train launcher: what the program does with its command line. tools/yolo_train.c holds
 * the option table and calls trn_launch once, as dav1d's tools do; the rest is here: the tools
 * (--summary, --bench, --bench-data, --plot), --data resolved once, the local ranks
 * (--nproc-per-node) and joining a job, --resume's checkpoint and records, --cache-dir, AutoBatch,
 * the run itself with its stop signals, and --evolve's generations.
 *
 * CONTRACT. The fields are the command line's, as parsed (strings borrowed from argv; NULL where
 * an option was not given), defaulted by trn_launch_opts_default as yolo-train's --help says. The
 * library prints nothing itself: every line goes to say (kind TRN_LAUNCH_OUT: a line for stdout;
 * TRN_LAUNCH_ERR: a message the program prefixes with its name, on stderr; TRN_LAUNCH_USAGE: a
 * command-line error, printed as the option parser prints its own). --data goes through pack,
 * which the caller supplies because the pack cache (pack/) sits above the trainer: it is called
 * once per split in this process, and local ranks get the packs' paths. stop_arm is called once,
 * just before a run starts: it installs the caller's stop handling (SIGINT, SIGTERM, SIGUSR1) and
 * returns the flag a signal sets (trn_train_opts.stop), or NULL when it cannot.
 * Returns the program's exit status: 0 done (or stopped by SIGTERM / SIGUSR1, saved), 1 failure,
 * 2 bad command line, 130 stopped by SIGINT.
 */
#ifndef TRN_LAUNCH_H
#define TRN_LAUNCH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum trn_launch_say { TRN_LAUNCH_OUT, TRN_LAUNCH_ERR, TRN_LAUNCH_USAGE };

struct trn_launch_opts {
    const char *records, *val_records, *cfg, *weights, *hyp, *device, *resume;
    const char *data;        /* --data DATA.yaml (through pack) */
    const char *data_source; /* --data-source: the DATA.yaml a local rank's --records came from */
    const char *pack_dir;    /* --pack-dir (read by the caller's pack) */
    const char *pack_codec;  /* --pack-codec raw|zstd (likewise) */
    const char *project, *name, *optimizer, *dist_backend, *cache_dir;
    const char *amp;         /* --amp: bf16, fp16, fp32, or NULL for the device's default */
    const char *val_amp;     /* --val-amp (--val-half: "fp16"), or NULL: the training's on a GPU */
    const char *cpu_engine;  /* --cpu-engine auto|onednn|reference, or NULL (auto) */
    const char *activations; /* --activations fp32|bf16-nhwc|bf16-nchw, or NULL (fp32) */
    long amp_inf_at;         /* --amp-test-inf-at NI (-1: not given) */
    unsigned long long cache_max;
    long img, batch, epochs, workers, threads, nc, patience, save_period, seed, stop_after;
    long nproc, bench_steps, bench_warmup;
    bool bench_step;
    double seconds, dist_timeout;
    bool summary, bench, json, plot, exist_ok, cos_lr, noval, nosave, page_cache, sync_bn;
    bool resume_other_data;
    bool direct, no_read_ahead;
    bool no_grad_overlap;    /* --no-grad-overlap: all-reduce the gradients after backward */
    bool device_path;        /* --device-path: the GPU path on the CPU ops (tests) */
    bool host_aug;           /* --host-aug: no GPU augmentation */
    bool cuda_graph;         /* --cuda-graph: the step captured once and replayed */
    bool any_algo;           /* --cudnn-any-algo */
    const char *cudnn_plan;  /* --cudnn-plan FILE */
    bool cudnn_tune;         /* --cudnn-tune */
    bool noautoanchor;       /* --noautoanchor */
    bool noplots;            /* --noplots */
    double label_smoothing;  /* --label-smoothing */
    bool single_cls;         /* --single-cls */
    bool image_weights;      /* --image-weights */
    bool rect, multi_scale;  /* --rect, --multi-scale */
    const char *evolve;      /* --evolve [N]: "" for the default 300 */
    const char *cache;       /* --cache [ram|disk]: "" for ram; NULL: not given */
    const char *cache_share; /* --cache-share node|rank: one RAM copy per node, or per rank */
    const char *peers;       /* --peers auto|off: nodes fill their caches from each other */
    const char *peer_host;   /* --peer-host ADDR: the IPv4 address this node announces */
    long peer_port;          /* --peer-port N: the peer server's port (0: any free one) */
    long freeze[64];         /* --freeze N | R [R ...] */
    int n_freeze;
    bool cuda_graph_fail;   /* --cuda-graph-test-fail: the capture acts as failed (tests) */
    double bucket_cap_mb;   /* --bucket-cap-mb: gradient bucket cap, MiB (DDP's bucket_cap_mb) */
    const char *models_dir; /* where --cfg NAME is looked up after $FFYOLO_MODELS_DIR, ./models */

    /* the caller's hooks (CONTRACT) */
    void (*say)(void *ctx, enum trn_launch_say kind, const char *text);
    void *say_ctx;
    /* DATA's split packed at img into out: 0, 1 (DATA has no such split), or < 0 (it said why) */
    int (*pack)(void *ctx, const char *data, const char *split, int img, char *out, size_t cap);
    void *pack_ctx;
    volatile sig_atomic_t *(*stop_arm)(void *ctx);
    void *stop_ctx;
    void (*progress)(void *ctx, const char *line, int final); /* trn_train_opts.progress */
    void *progress_ctx;
};

/* The defaults of yolo-train's --help (project runs/train, name exp, img 640, batch 16, ...). */
void trn_launch_opts_default(struct trn_launch_opts *o);

/* Runs what the command line asks for. argv: the command line as given (local ranks run it again
 * without --nproc-per-node). Returns the exit status (CONTRACT). */
int trn_launch(struct trn_launch_opts *o, int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
