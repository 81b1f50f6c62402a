/* The programs' command-line parser (argparse.h). */
#include "argparse.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HELP_WIDTH  96 /* --help lines wrap before this column */
#define HELP_INDENT 24 /* where an option's help text starts */

static void vusage(const char *prog, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nhint: %s --help lists the options\n", prog);
}

int ap_usage_error(const struct ap_spec *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vusage(s->prog, fmt, ap);
    va_end(ap);
    return 2;
}

int ap_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vusage(prog, fmt, ap);
    va_end(ap);
    return 2;
}

/* True when `key` is one of the '|'-separated names. */
static bool has_name(const char *names, const char *key)
{
    const size_t k = strlen(key);
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == k && !memcmp(p, key, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static bool parse_long(const char *v, long *out)
{
    char *end = NULL;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (errno || end == v || *end || *v == ' ' || *v == '\t') return false;
    *out = x;
    return true;
}

static bool parse_double(const char *v, double *out)
{
    char *end = NULL;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || *v == ' ' || *v == '\t' || !isfinite(x)) return false;
    *out = x;
    return true;
}

static int bad_long(const struct ap_spec *s, const char *key, const char *v, const struct ap_opt *o)
{
    return ap_usage_error(s, "%s: '%s' is not a whole number in [%.0f, %.0f]", key, v, o->lo,
                          o->hi);
}

/* Apply one option; *i may advance past consumed values. Returns 0 or 2. */
static int apply(const struct ap_spec *s, const struct ap_opt *o, const char *key, const char *val,
                 int argc, char **argv, int *i)
{
    if (o->kind == AP_FLAG || o->kind == AP_SET) {
        if (val) return ap_usage_error(s, "%s takes no value", key);
        if (o->kind == AP_FLAG)
            *(bool *)o->dst = true;
        else
            *(const char **)o->dst = o->choices;
        return 0;
    }
    if (o->kind == AP_OPTSTR) {
        if (!val) val = *i + 1 < argc && argv[*i + 1][0] != '-' ? argv[++*i] : "";
        *(const char **)o->dst = val;
        return 0;
    }
    if (o->kind == AP_LONGS || o->kind == AP_STRS) {
        int n = 0;
        for (;;) {
            const char *v = val;
            /* the values run up to the next option; a negative number is a value */
            if (!v && *i + 1 < argc &&
                (argv[*i + 1][0] != '-' ||
                 (o->kind == AP_LONGS && argv[*i + 1][1] >= '0' && argv[*i + 1][1] <= '9')))
                v = argv[++*i];
            if (!v) break;
            if (n == o->max_n)
                return ap_usage_error(s, "%s takes at most %d values", key, o->max_n);
            if (o->kind == AP_STRS) {
                if (!v[0]) return ap_usage_error(s, "%s: an empty value", key);
                ((const char **)o->dst)[n++] = v;
            } else {
                long x;
                if (!parse_long(v, &x) || x < o->lo || x > o->hi) return bad_long(s, key, v, o);
                ((long *)o->dst)[n++] = x;
            }
            if (val) break; /* --flag=V: that one value */
        }
        if (n == 0) return ap_usage_error(s, "%s needs a value", key);
        *o->n = n;
        return 0;
    }
    if (!val) {
        if (*i + 1 >= argc) return ap_usage_error(s, "%s needs a value", key);
        val = argv[++*i];
    }
    switch (o->kind) {
    case AP_STR:
        if (!val[0]) return ap_usage_error(s, "%s needs a non-empty value", key);
        *(const char **)o->dst = val;
        return 0;
    case AP_LONG: {
        long x;
        if (!parse_long(val, &x) || x < o->lo || x > o->hi) return bad_long(s, key, val, o);
        *(long *)o->dst = x;
        return 0;
    }
    case AP_DOUBLE: {
        double x;
        if (!parse_double(val, &x) || x > o->hi || x < o->lo || (o->open_lo && x == o->lo) ||
            (o->open_hi && x == o->hi))
            return ap_usage_error(s, "%s: '%s' is not a number in %c%g, %g%c", key, val,
                                  o->open_lo ? '(' : '[', o->lo, o->hi, o->open_hi ? ')' : ']');
        *(double *)o->dst = x;
        return 0;
    }
    case AP_CHOICE: {
        if (!has_name(o->choices, val)) {
            char list[256];
            size_t n = 0;
            for (const char *p = o->choices; *p && n + 3 < sizeof list; p++) {
                if (*p == '|') {
                    list[n++] = ',';
                    list[n++] = ' ';
                } else {
                    list[n++] = *p;
                }
            }
            list[n] = '\0';
            return ap_usage_error(s, "%s: '%s' is not one of %s", key, val, list);
        }
        *(const char **)o->dst = val;
        return 0;
    }
    case AP_CALL: {
        char why[256] = "";
        if (o->call(val, o->dst, why, sizeof why) < 0)
            return ap_usage_error(s, "%s: '%s' %s", key, val, why[0] ? why : "is not valid");
        return 0;
    }
    default:
        return ap_usage_error(s, "%s: internal error (option kind)", key);
    }
}

static const struct ap_opt *find(const struct ap_spec *s, const char *key)
{
    for (size_t k = 0; k < s->n_opts; k++)
        if (s->opts[k].names && has_name(s->opts[k].names, key)) return &s->opts[k];
    return NULL;
}

int ap_parse(const struct ap_spec *s, int argc, char **argv)
{
    if (s->n_positional) *s->n_positional = 0;
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || !a[1] || (a[1] >= '0' && a[1] <= '9')) {
            if (!s->positional || *s->n_positional == s->max_positional)
                return ap_usage_error(s, "unexpected argument '%s'", a);
            s->positional[(*s->n_positional)++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_positional = true;
            continue;
        }
        char key[64];
        const char *val = NULL;
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof key) {
            memcpy(key, a, (size_t)(eq - a));
            key[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a);
        }
        const struct ap_opt *o = find(s, key);
        if (!o && a[1] != '-' && a[2]) {
            /* -j4: a short option with its value attached */
            const char short_key[3] = { a[0], a[1], '\0' };
            o = find(s, short_key);
            if (o && (o->kind == AP_FLAG || o->kind == AP_SET)) o = NULL;
            if (o) {
                snprintf(key, sizeof key, "%s", short_key);
                val = a + 2;
            }
        }
        if (!o) return ap_usage_error(s, "unknown option '%s'", a);
        if (o->kind == AP_HELP) {
            if (val) return ap_usage_error(s, "%s takes no value", key);
            ap_help(s, stdout);
            return AP_HELPED;
        }
        const int rc = apply(s, o, key, val, argc, argv, &i);
        if (rc) return rc;
    }
    return 0;
}

/* Write text wrapped at HELP_WIDTH, continuation lines indented by `indent`; `col` is the
 * column the first word starts at. Explicit newlines in text are kept. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const char *p = text;
    while (*p) {
        if (*p == '\n') {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            p++;
            continue;
        }
        const char *w = p;
        while (*p && *p != ' ' && *p != '\n')
            p++;
        const int len = (int)(p - w);
        if (col > indent && col + 1 + len > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(w, 1, (size_t)len, f);
        col += len;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void ap_help(const struct ap_spec *s, FILE *f)
{
    fprintf(f, "usage: %s %s\n", s->prog, s->usage);
    if (s->about) wrap(f, s->about, 0, 0);
    fputc('\n', f);
    for (size_t k = 0; k < s->n_opts; k++) {
        const struct ap_opt *o = &s->opts[k];
        if (!o->names) {
            fprintf(f, "%s:\n", o->help);
            continue;
        }
        if (!o->help) continue;
        char head[128];
        size_t n = 0;
        for (const char *p = o->names; *p && n + 3 < sizeof head; p++) {
            if (*p == '|') {
                head[n++] = ',';
                head[n++] = ' ';
            } else {
                head[n++] = *p;
            }
        }
        head[n] = '\0';
        const int hl =
            fprintf(f, "  %s%s%s", head, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        if (hl + 2 > HELP_INDENT) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
        } else {
            fprintf(f, "%*s", HELP_INDENT - hl, "");
        }
        wrap(f, o->help, HELP_INDENT, HELP_INDENT);
    }
    if (s->epilog) {
        fputc('\n', f);
        wrap(f, s->epilog, 0, 0);
    }
}
