/* The options several programs share (common_opts.h). */
#include "common_opts.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kern_cuda.h"
#include "net.h"

int tool_parse_device(const char *v, void *dst, char *why, size_t cap)
{
    bool ok = !strcmp(v, "cpu") || !v[0];
    for (const char *p = v; !ok && *p;) {
        char *end = NULL;
        const long d = strtol(p, &end, 10);
        if (end == p || *p < '0' || *p > '9' || d > 63 || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            break;
        p = *end ? end + 1 : end;
        ok = !*p;
    }
    if (!ok) {
        snprintf(why, cap, "is not cpu or a list of CUDA device numbers (0 or 0,1)");
        return -EINVAL;
    }
    *(const char **)dst = v;
    return 0;
}

int tool_pick_device(const char *prog, const char *d)
{
    const int count = kern_cuda_device_count();
    if (!d || !d[0]) return count > 0 ? 0 : -1;
    if (!strcmp(d, "cpu")) return -1;
    const int id = atoi(d);
    if (id < count) return id;
    fprintf(stderr,
            "%s: --device %s: CUDA device %d is not there (%d visible%s)\n"
            "hint: --device cpu runs on the CPU\n",
            prog, d, id, count, count ? "" : "; or this build has no CUDA");
    return -2;
}

int tool_cpu_engine(const char *e)
{
    if (e && !strcmp(e, "reference")) return TRN_CPU_ENGINE_REF;
    if (e && !strcmp(e, "onednn")) return TRN_CPU_ENGINE_ONEDNN;
    return TRN_CPU_ENGINE_AUTO;
}

void tool_omp_wait(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    /* libgomp takes GOMP_SPINCOUNT over the policy's own count; PASSIVE is what a libgomp
       that ignores it (or another OpenMP runtime) falls back to */
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) || setenv("GOMP_SPINCOUNT", "5000", 1)) return;
    execv("/proc/self/exe", argv); /* keeps the pid, the descriptors and the rest of the env */
}

/* The launcher's lines: stdout, or stderr after the program's name; a usage error as argparse's. */
void tool_say(void *ctx, enum trn_launch_say kind, const char *text)
{
    const char *const prog = ctx;
    if (kind == TRN_LAUNCH_USAGE) {
        ap_error(prog, "%s", text);
    } else if (kind == TRN_LAUNCH_ERR) {
        fprintf(stderr, "%s: %s\n", prog, text);
    } else {
        printf("%s\n", text);
        fflush(stdout);
    }
}

static volatile sig_atomic_t stop_signal;

/*
 * SIGINT, SIGTERM and SIGUSR1: the first asks for a clean stop; a second SIGINT ends the process
 * at once (a checkpoint being written then is still a temporary: the previous last.ckpt stays
 * intact), repeated SIGTERM / SIGUSR1 are absorbed (see the top). They are blocked in the threads
 * the run creates (the loader's workers and the compute threads inherit the mask, so none of
 * their io_uring waits or reads is interrupted) and taken by a sigwait thread; threads that
 * existed before (OpenBLAS starts its pool at load time) run the same logic as a handler. Only
 * async-signal-safe work: one store to a sig_atomic_t, or _exit.
 */
static void on_stop_signal(int sig)
{
    if (sig == SIGINT && stop_signal) _exit(128 + sig);
    if (!stop_signal) stop_signal = sig;
}

static void *signal_thread(void *arg)
{
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) == 0) on_stop_signal(sig);
    }
    return NULL;
}

/* The launcher's stop_arm, just before the run: the handler, then the sigwait thread. */
volatile sig_atomic_t *tool_stop_arm(void *ctx)
{
    (void)ctx;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    static sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGUSR1);
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &stop_set, NULL) != 0 ||
        pthread_create(&t, NULL, signal_thread, &stop_set) != 0)
        return NULL;
    pthread_detach(t);
    return &stop_signal;
}
