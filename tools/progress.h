/*
 * The programs' tqdm-style bars (trn_progress_fn, trainer/core/cli.h) on a stream: a terminal
 * redraws the line in place after every step and keeps the final one; anything else (a log file,
 * a pipe) gets the final line of each run only, as one line per epoch or validation.
 */
#ifndef TOOLS_PROGRESS_H
#define TOOLS_PROGRESS_H

/* ctx: the FILE * to draw on. */
void tool_progress(void *ctx, const char *line, int final);

#endif
