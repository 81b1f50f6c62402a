/*
 * Internals of the `ffr` tool (tools/ffr*.c), shared between its command files. This is a
 * program, not a library: these helpers print their diagnostics to stderr themselves and return
 * the exit code the command should end with. Single-threaded; nothing here is reentrant.
 *
 * Exit codes: 0 success, 1 a problem with a file (unreadable, corrupt, a bad record), 2 bad
 * arguments (one error line and a usage hint on stderr).
 */
#ifndef FFYOLO_FFR_TOOL_H
#define FFYOLO_FFR_TOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "det.h"
#include "ffio.h"
#include "ffr.h"

#define FFRT_EXIT_OK    0
#define FFRT_EXIT_FAIL  1
#define FFRT_EXIT_USAGE 2
/* Returned by ffrt_parse_args when the command should go on (not an exit code). */
#define FFRT_PROCEED (-1)

/* Most positional arguments any command takes. */
#define FFRT_MAX_POS 4

/* One subcommand: its name, one-line usage, full --help text and entry point. */
struct ffrt_cmd {
    const char *name;  /* "info" */
    const char *usage; /* "ffr info FILE [--json]" */
    const char *help;  /* what --help prints after the usage line */
    int (*run)(const struct ffrt_cmd *cmd, int argc, char **argv); /* argv[0] is the name */
};

/* An option a command accepts. Exactly one of flag and value is set. */
struct ffrt_opt {
    const char *name;   /* long name without the leading "--" */
    char short_name;    /* single-letter form ('o' for -o), 0 for none */
    int *flag;          /* for flags: set to 1 when present */
    const char **value; /* for options with an argument: receives it (borrowed from argv) */
};

/* Positional arguments, in order, borrowed from argv. */
struct ffrt_args {
    const char *pos[FFRT_MAX_POS];
    int n_pos;
};

/*
 * Parses argv[1..argc) against opts (terminated by an entry with name NULL). "--help"/"-h" print
 * the command's help to stdout. Options may come before or after positional arguments; "--"
 * ends options; an argument that looks like a negative number ("-1") is positional, so record
 * numbers counted from the end need no "--".
 * Returns FFRT_PROCEED to go on, FFRT_EXIT_OK after --help, or FFRT_EXIT_USAGE after printing
 * the error (unknown option, missing option argument, wrong number of positional arguments).
 */
int ffrt_parse_args(const struct ffrt_cmd *cmd, int argc, char **argv, const struct ffrt_opt *opts,
                    int min_pos, int max_pos, struct ffrt_args *out);

/* Prints "ffr CMD: <message>" and the usage hint to stderr; returns FFRT_EXIT_USAGE. */
int ffrt_usage_error(const struct ffrt_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "ffr CMD: <message>" to stderr; returns FFRT_EXIT_FAIL. */
int ffrt_fail(const struct ffrt_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Parses a non-negative decimal integer option value into *out. Returns FFRT_PROCEED, or
 * FFRT_EXIT_USAGE after printing which option was bad.
 */
int ffrt_parse_count(const struct ffrt_cmd *cmd, const char *opt, const char *text, uint64_t *out);

/* An open dataset with what the commands need alongside the reader. */
struct ffrt_ds {
    const char *path;           /* as given on the command line */
    const struct ffr_reader *r; /* own, or the remote skeleton's reader */
    struct ffr_reader *own;     /* a local dataset's reader, owned (NULL for a URL) */
    struct ffio_http *http;     /* a URL's client, owned */
    struct ffio_remote *rm;     /* a URL's remote dataset, owned: records are read over HTTP */
    uint8_t *ext;               /* a URL's frame buffer (malloc), owned */
    size_t ext_cap;             /* bytes in ext */
    uint64_t count;             /* records */
    uint32_t n_shards;          /* files */
    const char *meta;           /* metadata text (not NUL-terminated), owned by r */
    size_t meta_len;            /* bytes */
    struct det_meta dm;         /* the metadata, parsed by det's reader; owned */
    int is_det;                 /* dm.is_det: the metadata says "encoding: ffr-det-1" */
    const char *encoding;       /* dm.encoding: the metadata's encoding value, or NULL */
    char **names;               /* dm.names: class names; entries may be NULL */
    uint32_t n_names;           /* entries in names */
    struct ffr_decoder *dec;    /* read state, owned */
    uint8_t *buf;               /* record buffer (malloc: aligned for det_decode), owned */
    size_t cap;                 /* bytes in buf */
};

/* The name of shard k for messages: its URL for a remote dataset, else its path. */
const char *ffrt_shard_name(const struct ffrt_ds *ds, uint32_t k, const struct ffr_shard_info *sh);

/*
 * Opens path with ffr_reader_open (an http(s):// or s3:// URL with ffio_remote_open: the index
 * is fetched and checked, records are read by range as they are asked for) and parses its
 * metadata (det_meta_parse). Metadata that is
 * not YAML, or that det's reader refuses, is not an error (the format only asks for text): a
 * warning naming the problem is printed and the dataset is treated as plain records. Returns
 * FFRT_EXIT_OK, or FFRT_EXIT_FAIL after printing the open error (which names the file and, for a
 * manifest, the shard). On failure *ds needs no close.
 */
int ffrt_ds_open(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, const char *path);

/* Releases everything ffrt_ds_open made. Accepts a zeroed ds. */
void ffrt_ds_close(struct ffrt_ds *ds);

/*
 * Parses a record number argument: a global number in [0, count) or a negative one counted from
 * the end (-1 is the last record). Returns FFRT_PROCEED with *out set, or FFRT_EXIT_USAGE after
 * printing why (not a number, out of range: the message gives the valid range).
 */
int ffrt_record_arg(const struct ffrt_cmd *cmd, const struct ffrt_ds *ds, const char *text,
                    uint64_t *out);

/*
 * Writes "FILE: record N" (one file) or "FILE: shard S (SHARDFILE): record N" into dst, for
 * messages about record i. Returns dst.
 */
const char *ffrt_where(const struct ffrt_ds *ds, uint64_t i, char *dst, size_t cap);

/*
 * Reads record i's decoded bytes into ds->buf. On success *data points at them (valid until the
 * next read on ds) and the length is returned; on failure prints the error naming the file,
 * shard and record and returns -1.
 */
int64_t ffrt_ds_read(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, uint64_t i,
                     const uint8_t **data);

/*
 * Reads record i and decodes it as a detection sample (views into ds->buf, valid until the next
 * read). Returns FFRT_EXIT_OK, or FFRT_EXIT_FAIL after printing the error naming the record.
 */
int ffrt_ds_read_det(const struct ffrt_cmd *cmd, struct ffrt_ds *ds, uint64_t i,
                     struct det_sample *s);

/* What an det_decode error means for a record (ffr_strerror speaks of files). */
const char *ffrt_det_strerror(int rc);

/* The class name for class id c from the metadata, or NULL when the metadata has none. */
const char *ffrt_class_name(const struct ffrt_ds *ds, uint32_t c);

/*
 * The file-name stem of a detection sample's source name: the part after the last '/', without
 * its extension. Falls back to the record number when the name is empty or would not be a safe
 * file name (control characters, "." or ".."). Writes at most cap bytes into dst; returns dst.
 */
const char *ffrt_sample_stem(const struct det_sample *s, uint64_t i, char *dst, size_t cap);

/* How ffrt_text_dup treats control characters. */
enum {
    FFRT_TEXT_JSON = 0,  /* keep them (cJSON escapes them) */
    FFRT_TEXT_LINES = 1, /* keep newline and tab, others become '?' (multi-line text) */
    FFRT_TEXT_LINE = 2,  /* all become '?' (a name inside one output line) */
};

/*
 * A NUL-terminated copy of n bytes of text for printing or JSON: invalid UTF-8 and NUL bytes
 * become U+FFFD; control characters are handled as `mode` (FFRT_TEXT_*) says. Returns a
 * malloc'd string (the caller frees it) or NULL when out of memory.
 */
char *ffrt_text_dup(const char *s, size_t n, int mode);

/* Writes n bytes to f; returns 0 or -errno (also checking ferror). */
int ffrt_write_all(FILE *f, const void *p, size_t n);

/* The commands (tools/ffr_info.c, ffr_verify.c, ffr_export.c, ffr_show.c). */
int ffrt_cmd_info(const struct ffrt_cmd *cmd, int argc, char **argv);
int ffrt_cmd_ls(const struct ffrt_cmd *cmd, int argc, char **argv);
int ffrt_cmd_verify(const struct ffrt_cmd *cmd, int argc, char **argv);
int ffrt_cmd_cat(const struct ffrt_cmd *cmd, int argc, char **argv);
int ffrt_cmd_export(const struct ffrt_cmd *cmd, int argc, char **argv);
int ffrt_cmd_show(const struct ffrt_cmd *cmd, int argc, char **argv);
/* tools/ffr_bench.c */
int ffrt_cmd_bench(const struct ffrt_cmd *cmd, int argc, char **argv);
/* tools/ffr_serve.c */
int ffrt_cmd_serve(const struct ffrt_cmd *cmd, int argc, char **argv);

#endif
