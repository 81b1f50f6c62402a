/*
 * tools/argparse: every option kind on a realistic table (values, aliases, --flag=value, -j4,
 * positionals, "--", negative numbers), every usage error (exit status 2, one line naming the
 * option and one hint line, the destinations untouched), and the generated --help (every
 * visible option, sections, wrapping at 96 columns, hidden options left out).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "argparse.h"
#include "tap.h"

struct vals {
    bool flag;
    const char *str, *opt, *set, *choice, *pos[3], *strs[3];
    long lng, longs[2];
    double dbl, open_dbl;
    int n_longs, n_strs, n_pos, called;
};

static int even_only(const char *v, void *dst, char *why, size_t cap)
{
    const long x = strtol(v, NULL, 10);
    if (x % 2) {
        snprintf(why, cap, "is odd");
        return -1;
    }
    *(int *)dst = (int)x;
    return 0;
}

#define N_ROWS 16
static size_t table(struct vals *V, struct ap_opt *o)
{
    const struct ap_opt t[] = {
        AP_SECTION("Values"),
        AP_OPT("-f|--flag", AP_FLAG, &V->flag, NULL, "a flag"),
        AP_OPT("--str", AP_STR, &V->str, "S", "a string"),
        AP_OPT("--opt", AP_OPTSTR, &V->opt, "[S]", "an optional value"),
        { .names = "--half",
          .kind = AP_SET,
          .dst = &V->set,
          .help = "sets fp16",
          .choices = "fp16" },
        AP_RANGE("-j|--long|--long-alias", AP_LONG, &V->lng, "N", "a long in [1, 64]", 1, 64),
        AP_RANGE("--dbl", AP_DOUBLE, &V->dbl, "X", "a double in [0, 1]", 0, 1),
        { .names = "--open",
          .kind = AP_DOUBLE,
          .dst = &V->open_dbl,
          .metavar = "X",
          .help = "a double in (0, 1)",
          .lo = 0,
          .hi = 1,
          .open_lo = true,
          .open_hi = true },
        { .names = "--choice",
          .kind = AP_CHOICE,
          .dst = &V->choice,
          .metavar = "C",
          .help = "one of SGD, Adam, AdamW",
          .choices = "SGD|Adam|AdamW" },
        AP_SECTION("Lists"),
        { .names = "--longs",
          .kind = AP_LONGS,
          .dst = V->longs,
          .metavar = "N [N]",
          .help = "one or two longs, negative ones too",
          .lo = -5,
          .hi = 5,
          .max_n = 2,
          .n = &V->n_longs },
        { .names = "--strs",
          .kind = AP_STRS,
          .dst = V->strs,
          .metavar = "S [S ...]",
          .help = "up to three strings; this help is long enough to wrap: it goes on and on so "
                  "that the generator has to break it over more than one line of the output",
          .max_n = 3,
          .n = &V->n_strs },
        { .names = "--even",
          .kind = AP_CALL,
          .dst = &V->called,
          .metavar = "N",
          .help = "an even number",
          .call = even_only },
        AP_OPT("--hidden", AP_FLAG, &V->flag, NULL, NULL),
        AP_OPT("-h|--help", AP_HELP, NULL, NULL, "this help"),
    };
    memcpy(o, t, sizeof t);
    return sizeof t / sizeof t[0];
}

static struct ap_spec spec(struct vals *V, struct ap_opt *o)
{
    memset(V, 0, sizeof *V);
    V->lng = 7;
    const struct ap_spec s = {
        .prog = "prog",
        .usage = "IN [options]",
        .about = "What prog does.",
        .epilog = "Exit status: 0 or 2.",
        .opts = o,
        .n_opts = table(V, o),
        .positional = V->pos,
        .max_positional = 3,
        .n_positional = &V->n_pos,
    };
    return s;
}

/* Run ap_parse on a NULL-terminated list (argv[0] added); stderr into err. */
static int parse(struct vals *V, char *err, size_t cap, const char *const *args)
{
    struct ap_opt o[N_ROWS];
    const struct ap_spec s = spec(V, o);
    char *argv[32] = { (char *)"prog" };
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = dup(2);
    dup2(fileno(tmp), 2);
    const int rc = ap_parse(&s, argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    const size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return rc;
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_values(void)
{
    struct vals V;
    char e[512];
    is_int(parse(&V, e, sizeof e,
                 ARGS("in", "-f", "--str", "a b", "--opt", "--half", "-j4", "--dbl=0.5", "--open",
                      "0.25", "--choice", "Adam", "--longs", "-3", "5", "--strs", "x", "y",
                      "--even=6", "out", "--", "--not-an-option")),
           0, "a full command line parses");
    ok(V.flag && !strcmp(V.str, "a b") && !strcmp(V.opt, "") && !strcmp(V.set, "fp16"),
       "flag, string, optional value absent (\"\"), set");
    ok(V.lng == 4 && V.dbl == 0.5 && V.open_dbl == 0.25 && !strcmp(V.choice, "Adam"),
       "-j4 attached, --dbl=0.5, open interval, choice");
    ok(V.n_longs == 2 && V.longs[0] == -3 && V.longs[1] == 5, "nargs='+' longs, a negative one");
    ok(V.n_strs == 2 && !strcmp(V.strs[1], "y"), "nargs='+' strings stop at the positional");
    ok(V.called == 6, "callback with --even=6");
    ok(V.n_pos == 3 && !strcmp(V.pos[0], "in") && !strcmp(V.pos[1], "out") &&
           !strcmp(V.pos[2], "--not-an-option"),
       "positionals anywhere, and after --");
    is_int(parse(&V, e, sizeof e, ARGS("--opt", "value", "--long-alias", "64", "-3")), 0,
           "an alias, the optional value given, a negative positional");
    ok(!strcmp(V.opt, "value") && V.lng == 64 && V.n_pos == 1 && !strcmp(V.pos[0], "-3"),
       "values as given");
    is_int(parse(&V, e, sizeof e, ARGS("--opt=", "--hidden")), 0, "--opt= and a hidden option");
    ok(!strcmp(V.opt, "") && V.flag, "accepted");
}

static void test_errors(void)
{
    static const struct {
        const char *args[4];
        const char *want;
    } cases[] = {
        { { "--bogus" }, "prog: unknown option '--bogus'" },
        { { "--str" }, "prog: --str needs a value" },
        { { "--str", "" }, "prog: --str needs a non-empty value" },
        { { "--flag=1" }, "prog: --flag takes no value" },
        { { "-j", "65" }, "prog: -j: '65' is not a whole number in [1, 64]" },
        { { "--long", "4x" }, "prog: --long: '4x' is not a whole number in [1, 64]" },
        { { "--dbl", "1.5" }, "prog: --dbl: '1.5' is not a number in [0, 1]" },
        { { "--dbl", "nan" }, "prog: --dbl: 'nan' is not a number in [0, 1]" },
        { { "--open", "1" }, "prog: --open: '1' is not a number in (0, 1)" },
        { { "--open", "0" }, "prog: --open: '0' is not a number in (0, 1)" },
        { { "--choice", "sgd" }, "prog: --choice: 'sgd' is not one of SGD, Adam, AdamW" },
        { { "--longs", "1", "2", "3" }, "prog: --longs takes at most 2 values" },
        { { "--longs" }, "prog: --longs needs a value" },
        { { "--longs", "9" }, "prog: --longs: '9' is not a whole number in [-5, 5]" },
        { { "--strs", "" }, "prog: --strs: an empty value" },
        { { "--even", "3" }, "prog: --even: '3' is odd" },
        { { "a", "b", "c", "d" }, "prog: unexpected argument 'd'" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct vals V;
        char e[512];
        const char *a[5] = { 0 };
        memcpy(a, cases[k].args, sizeof cases[k].args);
        const int rc = parse(&V, e, sizeof e, a);
        const bool good = rc == 2 && !strncmp(e, cases[k].want, strlen(cases[k].want)) &&
                          e[strlen(cases[k].want)] == '\n' && lines(e) == 2 &&
                          strstr(e, "\nhint: prog --help lists the options\n");
        ok(good, "usage error: %s", cases[k].want);
        if (!good) tap_diag("rc %d, stderr: %s", rc, e);
    }
    struct vals V;
    char e[512];
    parse(&V, e, sizeof e, ARGS("-j", "0"));
    is_int(V.lng, 7, "a refused value leaves the destination as it was");
}

/* -h prints the help on stdout and ends parsing with AP_HELPED, whatever follows. */
static void test_help_option(void)
{
    struct vals V;
    struct ap_opt o[N_ROWS];
    const struct ap_spec s = spec(&V, o);
    char *argv[] = { (char *)"prog", (char *)"--str",   (char *)"x",
                     (char *)"-h",   (char *)"--bogus", NULL };
    fflush(stdout);
    FILE *tmp = tmpfile();
    const int saved = dup(1);
    dup2(fileno(tmp), 1);
    const int rc = ap_parse(&s, 5, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    char out[64] = "";
    const size_t n = fread(out, 1, sizeof out - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    is_int(rc, AP_HELPED, "-h: AP_HELPED, before the unknown option after it");
    ok(!strncmp(out, "usage: prog IN [options]\n", 25), "the help went to stdout");
    ok(!strcmp(V.str, "x"), "options before -h were applied");
}

static void test_help(void)
{
    struct vals V;
    struct ap_opt o[N_ROWS];
    const struct ap_spec s = spec(&V, o);
    FILE *f = tmpfile();
    ap_help(&s, f);
    rewind(f);
    char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    ok(!strncmp(text, "usage: prog IN [options]\nWhat prog does.\n\n", 40), "usage and about");
    const char *want[] = { "Values:\n",
                           "  -f, --flag            a flag\n",
                           "  -j, --long, --long-alias N\n                        a long in",
                           "  --choice C            one of SGD, Adam, AdamW\n",
                           "Lists:\n",
                           "  -h, --help            this help\n",
                           "\nExit status: 0 or 2.\n" };
    int found = 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        found += strstr(text, want[k]) != NULL;
    is_int(found, (int)(sizeof want / sizeof want[0]), "options, sections, epilog as laid out");
    ok(!strstr(text, "--hidden"), "an option without help is hidden");
    int longest = 0, wrapped = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const int len = (int)(nl ? nl - p : (long)strlen(p));
        if (len > longest) longest = len;
        wrapped += !strncmp(p, "                        that the", 32) ||
                   !strncmp(p, "                        ", 24);
        p = nl ? nl + 1 : p + len;
    }
    ok(longest <= 96, "no line over 96 columns (longest %d)", longest);
    ok(wrapped >= 2, "long help wraps under its column (%d continuation lines)", wrapped);
}

int main(void)
{
    test_values();
    test_errors();
    test_help();
    test_help_option();
    return tap_done();
}
