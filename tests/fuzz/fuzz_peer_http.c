/*
 * Fuzz target for the peer server's request-head parser (io/ffio_peer.c, ffio_peer_parse): the
 * bytes a client on the network sends. A complete head's length must lie within the input and
 * within FFIO_PEER_HEAD_MAX; a name it accepts must be non-empty, NUL-terminated, of the safe
 * characters only and never start with '.' (so never "..", and never a path); a span range must
 * have first <= last; an error is one of the statuses the server answers with. Pipelined heads
 * are parsed one after the other as the server does. Nothing may crash or read out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ffio_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t left = size;
    for (int k = 0; k < 16; k++) {
        struct ffio_peer_req r;
        const int used = ffio_peer_parse(p, left, &r);
        if (used == 0) break;
        if (used < 0) {
            if (used != -400 && used != -405 && used != -431 && used != -505) abort();
            break;
        }
        if ((size_t)used > left || used > FFIO_PEER_HEAD_MAX || used < 4) abort();
        if (!r.not_found) {
            const size_t n = strnlen(r.name, sizeof r.name);
            if (n == 0 || n == sizeof r.name || r.name[0] == '.') abort();
            for (size_t i = 0; i < n; i++) {
                const char ch = r.name[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
                    abort();
            }
        }
        if (r.range == FFIO_PEER_RANGE_SPAN && r.first > r.last) abort();
        p += used;
        left -= (size_t)used;
    }
    return 0;
}
