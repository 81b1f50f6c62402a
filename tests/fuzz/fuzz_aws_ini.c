/*
 * Fuzz target for the AWS config-file reader (io/ffio_s3.c, ffio_ini_get): arbitrary bytes are
 * read as ~/.aws/credentials or ~/.aws/config. A value found is NUL-terminated, fits the buffer
 * and occurs in the input; a value too long is refused, never cut. Nothing may crash or read
 * out of bounds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ffio_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const q[][2] = { { "default", "aws_access_key_id" },
                                        { "default", "aws_secret_access_key" },
                                        { "profile dev", "region" },
                                        { "profile dev", "s3.addressing_style" },
                                        { "dev", "aws_session_token" } };
    const char *text = (const char *)data;
    for (size_t k = 0; k < sizeof q / sizeof q[0]; k++) {
        char out[32];
        const int n = ffio_ini_get(text, size, q[k][0], q[k][1], out, sizeof out);
        if (n == -ENAMETOOLONG || n == -1) continue;
        if (n < 0 || (size_t)n >= sizeof out || strlen(out) > (size_t)n) abort();
        if (n && !memmem(data, size, out, (size_t)n)) abort();
    }
    return 0;
}
