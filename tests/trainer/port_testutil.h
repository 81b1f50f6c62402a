/*
 * For the tests that start ranks on loopback (test_dist_comm.c, test_dist_overlap.c): a TCP port
 * p with p and p + 1 both free now (the star listens on MASTER_PORT + 1), and the notes a forked
 * rank leaves its parent. Header-only.
 */
#ifndef PORT_TESTUTIL_H
#define PORT_TESTUTIL_H

#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Returns such a port, or `fallback` when 50 tries found none. */
static inline int free_port_pair(int fallback)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        const int a = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t l = sizeof sa;
        if (bind(a, (struct sockaddr *)&sa, sizeof sa) < 0 ||
            getsockname(a, (struct sockaddr *)&sa, &l) < 0) {
            close(a);
            continue;
        }
        const int p = ntohs(sa.sin_port);
        const int b = socket(AF_INET, SOCK_STREAM, 0);
        sa.sin_port = htons((uint16_t)(p + 1));
        const int good = p < 65534 && bind(b, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(a);
        close(b);
        if (good) return p;
    }
    return fallback;
}

/* One line appended to FOLDER/rRANK.txt: what a forked rank tells the parent. */
static inline void tu_note(const char *folder, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void tu_note(const char *folder, int rank, const char *fmt, ...)
{
    char p[300];
    snprintf(p, sizeof p, "%s/r%d.txt", folder, rank);
    FILE *f = fopen(p, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

#endif
