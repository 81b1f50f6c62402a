/*
 * ffr serve DIR: the files of a directory over HTTP/1.1 with byte ranges, read-only: an origin
 * for `--cache-dir` and `ffr bench URL` without setting up nginx (the server is the one the
 * nodes' caches use to serve each other, io/ffio_peer.c). It runs until SIGINT or SIGTERM,
 * then prints what it served.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ffio.h"
#include "ffr_tool.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int ffrt_cmd_serve(const struct ffrt_cmd *cmd, int argc, char **argv)
{
    const char *host = "127.0.0.1", *port_s = NULL, *conns_s = NULL;
    const struct ffrt_opt opts[] = { { "host", 0, NULL, &host },
                                     { "port", 'p', NULL, &port_s },
                                     { "max-conns", 0, NULL, &conns_s },
                                     { NULL, 0, NULL, NULL } };
    struct ffrt_args a;
    int rc = ffrt_parse_args(cmd, argc, argv, opts, 1, 1, &a);
    if (rc != FFRT_PROCEED) return rc;
    struct ffio_peer_server_opts o;
    ffio_peer_server_opts_default(&o);
    o.bind_host = strcmp(host, "*") ? host : NULL;
    o.entries_only = false;
    uint64_t v;
    if (port_s) {
        if ((rc = ffrt_parse_count(cmd, "--port", port_s, &v)) != FFRT_PROCEED) return rc;
        if (v > 65535) return ffrt_usage_error(cmd, "--port %s: at most 65535", port_s);
        o.port = (int)v;
    }
    if (conns_s) {
        if ((rc = ffrt_parse_count(cmd, "--max-conns", conns_s, &v)) != FFRT_PROCEED) return rc;
        if (v < 1 || v > 4096) return ffrt_usage_error(cmd, "--max-conns %s: 1..4096", conns_s);
        o.max_conns = (unsigned)v;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct ffio_peer_server *s = NULL;
    char err[512] = "";
    if ((rc = ffio_peer_serve(a.pos[0], &o, &s, err, sizeof err)) < 0)
        return ffrt_fail(cmd, "%s", err[0] ? err : strerror(-rc));
    printf("ffr serve: %s at http://%s:%d/ffr/ (Ctrl-C to stop)\n", a.pos[0],
           o.bind_host ? o.bind_host : "HOST", ffio_peer_server_port(s));
    fflush(stdout);
    while (!stop)
        pause();
    struct ffio_peer_server_stats st;
    ffio_peer_server_stats(s, &st);
    ffio_peer_server_stop(s);
    printf("ffr serve: %" PRIu64 " requests, %" PRIu64 " body bytes, %" PRIu64
           " not found, %" PRIu64 " refused\n",
           st.requests, st.bytes, st.not_found, st.refused);
    return FFRT_EXIT_OK;
}
