/*
 * Fuzz target: the programs' command-line parser (tools/argparse.c). The input is split at NUL
 * bytes into arguments. Whatever they are, ap_parse returns 0 or 2, every value it stores is in
 * its option's range, positionals never exceed their array, and --help renders.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int accept_any(const char *v, void *dst, char *why, size_t cap)
{
    if (v[0] == 'x') {
        snprintf(why, cap, "starts with x");
        return -1;
    }
    *(const char **)dst = v;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAX_ARGS = 64 };
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1] = { (char *)"prog" };
    int argc = 1;
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    bool flag = false, help = false;
    const char *str = NULL, *opt = NULL, *choice = NULL, *call = NULL, *set = NULL;
    const char *pos[2] = { 0 }, *strs[3] = { 0 };
    long lng = 1, longs[2] = { 0 };
    double dbl = 0.5;
    int n_pos = 0, n_longs = 0, n_strs = 0;
    const struct ap_opt o[] = {
        AP_OPT("-f|--flag", AP_FLAG, &flag, NULL, "f"),
        AP_OPT("-s|--str", AP_STR, &str, "S", "s"),
        AP_OPT("--opt", AP_OPTSTR, &opt, "[S]", "o"),
        { .names = "--set", .kind = AP_SET, .dst = &set, .help = "set", .choices = "v" },
        AP_RANGE("-j|--long", AP_LONG, &lng, "N", "l", 1, 64),
        { .names = "--dbl",
          .kind = AP_DOUBLE,
          .dst = &dbl,
          .metavar = "X",
          .help = "d",
          .lo = 0,
          .hi = 1,
          .open_lo = true },
        { .names = "--choice",
          .kind = AP_CHOICE,
          .dst = &choice,
          .metavar = "C",
          .help = "c",
          .choices = "a|bb|ccc" },
        { .names = "--longs",
          .kind = AP_LONGS,
          .dst = longs,
          .metavar = "N",
          .help = "ls",
          .lo = -3,
          .hi = 3,
          .max_n = 2,
          .n = &n_longs },
        { .names = "--strs",
          .kind = AP_STRS,
          .dst = strs,
          .metavar = "S",
          .help = "ss",
          .max_n = 3,
          .n = &n_strs },
        { .names = "--call",
          .kind = AP_CALL,
          .dst = &call,
          .metavar = "V",
          .help = "cb",
          .call = accept_any },
        AP_OPT("-h|--help", AP_FLAG, &help, NULL, "h"),
    };
    const struct ap_spec s = { .prog = "prog",
                               .usage = "[options]",
                               .opts = o,
                               .n_opts = sizeof o / sizeof o[0],
                               .positional = pos,
                               .max_positional = 2,
                               .n_positional = &n_pos };
    FILE *devnull = fopen("/dev/null", "w");
    FILE *saved = stderr;
    if (devnull) stderr = devnull; /* usage errors are expected; keep the fuzzer quiet */
    const int rc = ap_parse(&s, argc, argv);
    stderr = saved;
    if (rc != 0 && rc != 2) abort();
    if (lng < 1 || lng > 64 || !(dbl > 0 && dbl <= 1)) abort();
    if (n_pos < 0 || n_pos > 2 || n_longs < 0 || n_longs > 2 || n_strs < 0 || n_strs > 3) abort();
    for (int i = 0; i < n_longs; i++)
        if (longs[i] < -3 || longs[i] > 3) abort();
    for (int i = 0; i < n_strs; i++)
        if (!strs[i] || !strs[i][0]) abort();
    if (choice && strcmp(choice, "a") && strcmp(choice, "bb") && strcmp(choice, "ccc")) abort();
    if (call && call[0] == 'x') abort();
    if (str && !str[0]) abort();
    if (devnull) {
        ap_help(&s, devnull);
        fclose(devnull);
    }
    free(buf);
    return 0;
}
