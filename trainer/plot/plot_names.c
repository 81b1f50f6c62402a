/* Class names from a dataset's metadata (plots.h), made printable for cairo. */
#include "priv/draw.h"

#include "det.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0)
        k = 2, cp = s[0] & 0x1Fu;
    else if ((s[0] & 0xF0) == 0xE0)
        k = 3, cp = s[0] & 0x0Fu;
    else if ((s[0] & 0xF8) == 0xF0)
        k = 4, cp = s[0] & 0x07u;
    else
        return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* A printable copy: cairo stops drawing on invalid UTF-8, and control bytes would garble. */
static char *printable_dup(const unsigned char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_len(s + i, n - i);
        if (k == 0 || (k == 1 && (s[i] < 0x20 || s[i] == 0x7F))) {
            d[o++] = '?';
            i++;
        } else {
            memcpy(d + o, s + i, k);
            o += k;
            i += k;
        }
    }
    d[o] = '\0';
    return d;
}

int trn_plot_names_parse(const char *meta, size_t len, struct trn_plot_names *out)
{
    if (!out) return -EINVAL;
    out->names = NULL;
    out->n = 0;
    struct det_meta m;
    const int rc = det_meta_parse(meta, len, &m, NULL, 0);
    /* metadata det refuses (not YAML, a bound broken) names nothing here: plots show numbers,
     * and the loader, which reads the same metadata, says what is wrong with it */
    if (rc < 0) return rc == -ENOMEM ? rc : 0;
    if (m.n_names && !(out->names = calloc(m.n_names, sizeof *out->names))) {
        det_meta_free(&m);
        return -ENOMEM;
    }
    out->n = (int)m.n_names;
    for (uint32_t k = 0; k < m.n_names; k++)
        if (m.names[k] && !(out->names[k] = printable_dup((const unsigned char *)m.names[k],
                                                          strlen(m.names[k])))) {
            det_meta_free(&m);
            trn_plot_names_free(out);
            return -ENOMEM;
        }
    det_meta_free(&m);
    return 0;
}

void trn_plot_names_free(struct trn_plot_names *names)
{
    if (!names) return;
    for (int k = 0; k < names->n; k++)
        free(names->names[k]);
    free(names->names);
    names->names = NULL;
    names->n = 0;
}
