/* The local launcher: torchrun --nproc-per-node on one host (dist.h, trn_dist_launch_local). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"

static void say(trn_dist_log_fn log, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(trn_dist_log_fn log, void *ctx, const char *fmt, ...)
{
    if (!log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log(ctx, line);
}

/* A port p with p and p + 1 free now (the TCP star listens on MASTER_PORT + 1). */
static int free_port_pair(void)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        const int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t l = sizeof sa;
        int p = -1;
        if (a >= 0 && b >= 0 && bind(a, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            getsockname(a, (struct sockaddr *)&sa, &l) == 0) {
            p = ntohs(sa.sin_port);
            sa.sin_port = htons((uint16_t)(p + 1));
            if (p >= 65534 || bind(b, (struct sockaddr *)&sa, sizeof sa) != 0) p = -1;
        }
        if (a >= 0) close(a);
        if (b >= 0) close(b);
        if (p > 0) return p;
    }
    return -1;
}

/* dist.h has the contract. */
int trn_dist_launch_local(int nproc, char *const *argv, double grace_s, trn_dist_log_fn log,
                          void *log_ctx)
{
    if (nproc < 1 || !argv || !argv[0]) return 1;
    pid_t *pid = calloc((size_t)nproc, sizeof *pid);
    if (!pid) {
        say(log, log_ctx, "out of memory");
        return 1;
    }
    const char *mp = getenv("MASTER_PORT");
    const int port = mp ? atoi(mp) : free_port_pair();
    if (port <= 0 || port > 65534) {
        say(log, log_ctx, "--nproc-per-node: no free port pair on 127.0.0.1 (set MASTER_PORT)");
        free(pid);
        return 1;
    }
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    const pid_t parent = getpid();
    int alive = 0, status = 0;
    for (int r = 0; r < nproc; r++) {
        const pid_t p = fork();
        if (p == 0) {
            char v[5][64];
            snprintf(v[0], sizeof v[0], "%d", r);
            snprintf(v[1], sizeof v[1], "%d", nproc);
            snprintf(v[2], sizeof v[2], "%d", port);
            setenv("RANK", v[0], 1);
            setenv("LOCAL_RANK", v[0], 1);
            setenv("WORLD_SIZE", v[1], 1);
            setenv("LOCAL_WORLD_SIZE", v[1], 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", v[2], 1);
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1); /* the parent died before prctl */
            sigprocmask(SIG_SETMASK, &old, NULL);
            execv("/proc/self/exe", argv);
            /* the child: stderr, as a rank's own messages */
            fprintf(stderr, "rank %d: cannot exec /proc/self/exe: %s\n", r, strerror(errno));
            _exit(127);
        }
        if (p < 0) {
            say(log, log_ctx, "fork: %s", strerror(errno));
            status = 1;
            break;
        }
        pid[r] = p;
        alive++;
        say(log, log_ctx, "started rank %d of %d (pid %ld)", r, nproc, (long)p);
    }
    double kill_at = status ? 0 : -1; /* when to SIGKILL the ranks left (after a failure) */
    while (alive > 0) {
        if (kill_at >= 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec >= kill_at) {
                for (int r = 0; r < nproc; r++)
                    if (pid[r] > 0) kill(pid[r], SIGKILL);
            }
        }
        struct timespec wait = { 0, 200 * 1000 * 1000 };
        const int sig = sigtimedwait(&set, NULL, &wait);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1) {
            for (int r = 0; r < nproc; r++)
                if (pid[r] > 0) kill(pid[r], sig);
        }
        int st = 0;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            int r = 0;
            while (r < nproc && pid[r] != p)
                r++;
            if (r == nproc) continue;
            pid[r] = -1;
            alive--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (code != 0) {
                if (!WIFEXITED(st))
                    say(log, log_ctx, "rank %d was killed by signal %d", r, WTERMSIG(st));
                if (!status) status = code;
                if (kill_at < 0) {
                    struct timespec t;
                    clock_gettime(CLOCK_MONOTONIC, &t);
                    kill_at = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec + grace_s;
                }
            }
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(pid);
    return status;
}
