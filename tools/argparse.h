/*
 * argparse: the programs' one command-line parser, driven by a table of options that also
 * generates --help, so a flag, its help line and its check are written once. It accepts what
 * Python's argparse accepts for our flags (the ultralytics scripts use it): `--flag VALUE`,
 * `--flag=VALUE`, aliases (`--img|--imgsz|--img-size`), an optional value (nargs='?'), several
 * values (nargs='+'), positional arguments. Anything else is a usage error: one line
 * "PROG: what is wrong" and one line "hint: PROG --help lists the options", exit status 2.
 *
 * Flag names follow ultralytics (train.py, val.py, detect.py, export.py) where it has the flag;
 * our own flags use the same style (lower case, words joined by '-').
 */
#ifndef AP_ARGPARSE_H
#define AP_ARGPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ap_kind {
    AP_FLAG,   /* bool *dst = true; a value (--flag=x) is an error */
    AP_SET,    /* const char **dst = set: a flag that stands for a value (--half: "fp16") */
    AP_STR,    /* const char **dst = the value (borrowed from argv; an empty one is refused) */
    AP_OPTSTR, /* nargs='?': the next argument if it does not start with '-', else "" */
    AP_LONG,   /* long *dst, in [lo, hi] */
    AP_DOUBLE, /* double *dst, in [lo, hi] (or (lo, hi] with open_lo), finite */
    AP_CHOICE, /* const char **dst = one of `choices` ("a|b|c"), compared as written */
    AP_LONGS,  /* nargs='+': up to `max_n` longs in [lo, hi] into long *dst, count in *n */
    AP_STRS,   /* nargs='+': up to `max_n` non-empty strings into const char **dst, count in *n */
    AP_CALL,   /* call(value, dst, why, why_cap): 0, or < 0 with the reason in why */
    AP_HELP,   /* print the generated --help to stdout; ap_parse returns AP_HELPED at once */
};

typedef int (*ap_call_fn)(const char *value, void *dst, char *why, size_t why_cap);

struct ap_opt {
    const char *names; /* "--img|--imgsz" or "-h|--help"; NULL: a section heading (help) */
    enum ap_kind kind;
    void *dst;
    const char *metavar; /* value name in --help ("N", "FILE"); NULL for flags */
    const char *help;    /* one paragraph, wrapped by the generator; NULL hides the option */
    double lo, hi;       /* AP_LONG, AP_DOUBLE, AP_LONGS ranges (inclusive) */
    bool open_lo;        /* AP_DOUBLE: lo itself refused */
    bool open_hi;        /* AP_DOUBLE: hi itself refused */
    const char *choices; /* AP_CHOICE: "a|b|c"; AP_SET: the value set */
    int max_n;           /* AP_LONGS, AP_STRS: most values */
    int *n;              /* AP_LONGS, AP_STRS: values given (a repeat replaces them) */
    ap_call_fn call;     /* AP_CALL */
};

/* Table rows: a heading in --help between groups of options; an option without a range,
 * choices or callback; an AP_LONG or AP_DOUBLE option with its inclusive range. Other rows use
 * designated initialisers. */
/* clang-format off */
#define AP_SECTION(title) { .names = NULL, .help = (title) }
#define AP_OPT(names_, kind_, dst_, metavar_, help_) \
    { .names = (names_), .kind = (kind_), .dst = (dst_), .metavar = (metavar_), .help = (help_) }
#define AP_RANGE(names_, kind_, dst_, metavar_, help_, lo_, hi_) \
    { .names = (names_), .kind = (kind_), .dst = (dst_), .metavar = (metavar_), .help = (help_), \
      .lo = (lo_), .hi = (hi_) }
/* clang-format on */

/* Positional arguments: up to max into dst[], their count in *n. */
struct ap_spec {
    const char *prog;   /* "yolo-train" */
    const char *usage;  /* the line after "usage: PROG " */
    const char *about;  /* paragraph under the usage line */
    const char *epilog; /* text at the end of --help (exit status, examples), or NULL */
    const struct ap_opt *opts;
    size_t n_opts;
    const char **positional; /* NULL: none accepted */
    int max_positional;
    int *n_positional;
    const char *positional_name; /* "DATASET" in messages */
};

/* ap_parse's return after an AP_HELP option printed the help: the program exits 0. */
#define AP_HELPED 1

/*
 * Parse argv[1..argc) into the table's destinations (defaults are whatever they held). Returns 0,
 * AP_HELPED (the help was printed), or 2 after printing the usage error to stderr. A program
 * ends with `return rc == AP_HELPED ? 0 : rc` on a non-zero rc.
 */
int ap_parse(const struct ap_spec *s, int argc, char **argv);

/* --help, generated: usage, about, then every option (name, metavar, wrapped help) under its
 * section, then the epilog. */
void ap_help(const struct ap_spec *s, FILE *f);

/* A usage error found after parsing (a missing required flag, two flags that exclude each
 * other): prints "PROG: message" and the hint, returns 2. */
int ap_usage_error(const struct ap_spec *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The same for code that has the program's name but not its spec. */
int ap_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
