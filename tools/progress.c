/* Progress bars on a terminal or a log (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

void tool_progress(void *ctx, const char *line, int final)
{
    FILE *f = ctx;
    if (isatty(fileno(f)))
        fprintf(f, "\r%s\x1b[K%s", line, final ? "\n" : "");
    else if (final)
        fprintf(f, "%s\n", line);
    fflush(f);
}
