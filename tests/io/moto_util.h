/*
 * moto_server for the S3 tests (test_ffio_s3.c, test_ffio_s3_put.c): tests/io/s3_moto.py started
 * as a child, its one JSON line read (port, a user's key pair, a session's key pair and token),
 * stopped by closing its standard input. DIR's files are uploaded under s3://BUCKET/data/.
 */
#ifndef MOTO_UTIL_H
#define MOTO_UTIL_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffio.h"

struct moto {
    pid_t pid;
    int to; /* its stdin: closing it stops the server */
    int port;
    char key[128], secret[128], skey[128], ssecret[128], token[2048];
};

/* The string value of "name" in a one-line JSON object (the helper's line; no escapes in it). */
static inline int json_str(const char *line, const char *name, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", name);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    const char *q = strchr(p, '"');
    if (!q || (size_t)(q - p) >= cap) return -1;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return 0;
}

/* Starts the helper; returns 0, or 1 with why filled when this part must be skipped. */
static inline int moto_start(struct moto *m, const char *script, const char *bucket,
                             const char *dir, char *why, size_t cap)
{
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        return 1;
    }
    m->pid = fork();
    if (m->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execlp("python3", "python3", script, bucket, dir, "data", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    m->to = in[1];
    char line[8192];
    size_t got = 0;
    struct pollfd p = { .fd = out[0], .events = POLLIN };
    const time_t t0 = time(NULL);
    while (got < sizeof line - 1 && !memchr(line, '\n', got) && time(NULL) - t0 < 90) {
        if (poll(&p, 1, 1000) <= 0) continue;
        const ssize_t k = read(out[0], line + got, sizeof line - 1 - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    line[got] = '\0';
    close(out[0]);
    char port[16] = "";
    if (json_str(line, "skip", why, cap) == 0) return 1;
    if (sscanf(line, "{\"port\": %d", &m->port) != 1 || json_str(line, "key", m->key, 128) ||
        json_str(line, "secret", m->secret, 128) || json_str(line, "session_key", m->skey, 128) ||
        json_str(line, "session_secret", m->ssecret, 128) ||
        json_str(line, "session_token", m->token, sizeof m->token)) {
        snprintf(why, cap, "the moto helper did not start (python3 with moto: %.200s)",
                 got ? line : "no output");
        (void)port;
        return 1;
    }
    return 0;
}

static inline void moto_stop(struct moto *m)
{
    if (m->to >= 0) close(m->to);
    int st;
    for (int t = 0; t < 100 && waitpid(m->pid, &st, WNOHANG) == 0; t++)
        usleep(50000);
    if (waitpid(m->pid, &st, WNOHANG) == 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &st, 0);
    }
}

/* Where the helper serves, signed with its user's keys (path-style, us-east-1). */
static inline void moto_s3_config(const struct moto *m, struct ffio_s3_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->region, sizeof c->region, "us-east-1");
    c->path_style = true;
    snprintf(c->endpoint, sizeof c->endpoint, "http://127.0.0.1:%d", m->port);
    snprintf(c->access_key_id, sizeof c->access_key_id, "%s", m->key);
    snprintf(c->secret_access_key, sizeof c->secret_access_key, "%s", m->secret);
    snprintf(c->source, sizeof c->source, "the test");
}

#endif /* MOTO_UTIL_H */
