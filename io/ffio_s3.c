/*
 * s3:// URLs for the HTTP client (ffio.h, "share" block): where the credentials, region and
 * endpoint come from (the AWS CLI's rules), which http(s) URL an s3:// URL is requested at, and
 * the two small parsers this needs: an INI reader for ~/.aws/credentials and ~/.aws/config, and
 * an XML element extractor for S3's <Error> answers. Signing itself is libcurl's
 * (CURLOPT_AWS_SIGV4, in ffio_http.c): nothing here touches a key beyond copying it.
 *
 * Both parsers are single passes over a bounded buffer with no allocation: a config file is read
 * whole only up to 1 MiB, an answer's body is kept only up to what ffio_http.c captures, so no
 * input can make them slow or large (fuzz targets: tests/fuzz/fuzz_s3_xml.c, fuzz_aws_ini.c).
 */
#include "ffio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S3_CONFIG_FILE_MAX ((size_t)1 << 20)

bool ffio_s3_is_url(const char *p)
{
    return p && !strncmp(p, "s3://", 5);
}

/* ---- XML: one element's text ---- */

static bool xml_name_end(char c)
{
    return c == '>' || c == '/' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int ffio_xml_span(const char *xml, size_t n, size_t *pos, const char *tag, size_t *begin,
                  size_t *len)
{
    const size_t tl = strlen(tag);
    if (!xml || !pos || !tl || *pos > n) return -1;
    for (size_t i = *pos; i < n;) {
        const char *lt = memchr(xml + i, '<', n - i);
        if (!lt) return -1;
        const size_t a = (size_t)(lt - xml);
        i = a + 1;
        if (n - a < tl + 2 || memcmp(xml + a + 1, tag, tl) || !xml_name_end(xml[a + 1 + tl]))
            continue;
        const char *gt = memchr(xml + a + 1 + tl, '>', n - (a + 1 + tl));
        if (!gt) return -1;
        const size_t g = (size_t)(gt - xml);
        if (xml[g - 1] == '/') { /* <tag/> */
            *begin = g + 1;
            *len = 0;
            *pos = g + 1;
            return 0;
        }
        /* The first "</tag>" after it closes it: S3 never nests an element in one of its own
         * name, and not looking for nesting keeps this one pass. */
        for (size_t j = g + 1; j < n;) {
            const char *c = memchr(xml + j, '<', n - j);
            if (!c) return -1;
            const size_t b = (size_t)(c - xml);
            j = b + 1;
            if (n - b >= tl + 3 && xml[b + 1] == '/' && !memcmp(xml + b + 2, tag, tl) &&
                xml[b + 2 + tl] == '>') {
                *begin = g + 1;
                *len = b - (g + 1);
                *pos = b + 3 + tl;
                return 0;
            }
        }
        return -1;
    }
    return -1;
}

/* Appends one code point as UTF-8 (out has room checked by the caller's counting). */
static size_t utf8_put(unsigned long cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The entity at s[0] == '&' (at most m bytes): its decoded bytes into o, its length in *used.
 * An entity this does not know stays as it stands (one '&'). */
static size_t entity(const char *s, size_t m, char *o, size_t *used)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {
        { "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' }, { "quot;", '"' }, { "apos;", '\'' }
    };
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
        const size_t l = strlen(named[k].name);
        if (m >= 1 + l && !memcmp(s + 1, named[k].name, l)) {
            o[0] = named[k].c;
            *used = 1 + l;
            return 1;
        }
    }
    if (m >= 4 && s[1] == '#') {
        const bool hex = s[2] == 'x' || s[2] == 'X';
        unsigned long cp = 0;
        size_t i = hex ? 3 : 2, digits = 0;
        for (; i < m && digits < 8; i++, digits++) {
            const char c = s[i];
            int d = c >= '0' && c <= '9'          ? c - '0'
                    : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                  : -1;
            if (d < 0) break;
            cp = cp * (hex ? 16 : 10) + (unsigned long)d;
        }
        if (digits && i < m && s[i] == ';' && cp && cp <= 0x10ffff &&
            !(cp >= 0xd800 && cp <= 0xdfff)) {
            *used = i + 1;
            return utf8_put(cp, o);
        }
    }
    o[0] = '&';
    *used = 1;
    return 1;
}

int ffio_xml_next(const char *xml, size_t n, size_t *pos, const char *tag, char *out, size_t cap)
{
    size_t b, l;
    if (ffio_xml_span(xml, n, pos, tag, &b, &l) < 0 || l > INT_MAX) return -1;
    size_t k = 0;
    for (size_t i = b; i < b + l;) {
        char tmp[4];
        size_t used = 1, m = 1;
        if (xml[i] == '&')
            m = entity(xml + i, b + l - i, tmp, &used);
        else
            tmp[0] = xml[i];
        for (size_t q = 0; q < m; q++, k++)
            if (out && k + 1 < cap) out[k] = tmp[q];
        i += used;
    }
    if (out && cap) out[k < cap ? k : cap - 1] = '\0';
    return (int)k;
}

/* ---- INI: ~/.aws/credentials and ~/.aws/config ---- */

static const char *trim(const char *a, const char *e, size_t *len)
{
    while (a < e && (*a == ' ' || *a == '\t'))
        a++;
    while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        e--;
    *len = (size_t)(e - a);
    return a;
}

int ffio_ini_get(const char *text, size_t n, const char *section, const char *key, char *out,
                 size_t cap)
{
    if (!text || !section || !key || !out || !cap) return -1;
    const size_t sl = strlen(section), kl = strlen(key);
    bool in = false;
    char parent[128] = "";
    const char *val = NULL;
    size_t vlen = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        const char *ls = text + i, *le = nl ? nl : text + n;
        i = (size_t)(le - text) + 1;
        const bool indented = ls < le && (*ls == ' ' || *ls == '\t');
        size_t len;
        const char *t = trim(ls, le, &len);
        if (!len || *t == '#' || *t == ';') continue;
        if (*t == '[') {
            size_t nlen = 0;
            const char *close = memchr(t, ']', len);
            const char *name = close ? trim(t + 1, close, &nlen) : NULL;
            in = name && nlen == sl && !memcmp(name, section, sl);
            parent[0] = '\0';
            continue;
        }
        if (!in) continue;
        const char *eq = memchr(t, '=', len);
        if (!eq) continue;
        size_t klen, l2;
        const char *k = trim(t, eq, &klen);
        const char *v = trim(eq + 1, t + len, &l2);
        bool match;
        if (indented && parent[0]) {
            const size_t pl = strlen(parent);
            match = kl == pl + 1 + klen && !memcmp(key, parent, pl) && key[pl] == '.' &&
                    !memcmp(key + pl + 1, k, klen);
        } else {
            /* "s3 =" with nothing after it opens a sub-section of indented lines. */
            if (!l2 && klen < sizeof parent) {
                memcpy(parent, k, klen);
                parent[klen] = '\0';
            } else {
                parent[0] = '\0';
            }
            match = klen == kl && !memcmp(k, key, kl);
        }
        if (match) {
            val = v;
            vlen = l2;
        }
    }
    if (!val) return -1;
    if (vlen >= cap || vlen > INT_MAX) return -ENAMETOOLONG;
    memcpy(out, val, vlen);
    out[vlen] = '\0';
    return (int)vlen;
}

/* ---- the configuration ---- */

/* Reads a config file whole (at most S3_CONFIG_FILE_MAX). *text NULL: it does not exist. */
static int read_config_file(const char *path, char **text, size_t *n, char *err, size_t cap)
{
    *text = NULL;
    *n = 0;
    const int fd = ffr_open_regular(path, 0);
    if (fd == -ENOENT || fd == -ENOTDIR) return 0;
    if (fd < 0) {
        snprintf(err, cap, "%s: %s", path, fd <= -1000 ? ffr_strerror(fd) : strerror(-fd));
        return fd <= -1000 ? -EINVAL : fd;
    }
    char *buf = malloc(S3_CONFIG_FILE_MAX + 1);
    int rc = buf ? 0 : -ENOMEM;
    size_t got = 0;
    while (rc == 0 && got <= S3_CONFIG_FILE_MAX) {
        const ssize_t k = read(fd, buf + got, S3_CONFIG_FILE_MAX + 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = -errno;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (rc == 0 && got > S3_CONFIG_FILE_MAX) {
        rc = -EINVAL;
        snprintf(err, cap, "%s: larger than %zu bytes; not an AWS config file", path,
                 S3_CONFIG_FILE_MAX);
    } else if (rc < 0) {
        snprintf(err, cap, "%s: %s", path, strerror(-rc));
    }
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *text = buf;
    *n = got;
    return 0;
}

static int put(char *dst, size_t cap, const char *src, const char *what, char *err, size_t ecap)
{
    if (strlen(src) >= cap) {
        snprintf(err, ecap, "%s is %zu bytes, longer than the %zu accepted", what, strlen(src),
                 cap - 1);
        return -EINVAL;
    }
    snprintf(dst, cap, "%s", src);
    return 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* key from the file's section into dst: 1 found, 0 absent, <0 too long. */
static int ini_put(const char *text, size_t n, const char *sec, const char *key, char *dst,
                   size_t cap, const char *path, char *err, size_t ecap)
{
    if (!text) return 0;
    const int r = ffio_ini_get(text, n, sec, key, dst, cap);
    if (r == -ENAMETOOLONG) {
        snprintf(err, ecap, "%s [%s] %s: longer than the %zu bytes accepted", path, sec, key,
                 cap - 1);
        return -EINVAL;
    }
    return r >= 0;
}

int ffio_s3_config_load(struct ffio_s3_config *c, char *err, size_t err_cap)
{
    char dummy[8];
    if (!err || !err_cap) err = dummy, err_cap = sizeof dummy;
    err[0] = '\0';
    if (!c) return -EINVAL;
    memset(c, 0, sizeof *c);
    const char *profile = env("AWS_PROFILE");
    if (!profile) profile = env("AWS_DEFAULT_PROFILE");
    if (!profile) profile = "default";
    const char *home = env("HOME");
    char cred_path[PATH_MAX], conf_path[PATH_MAX], conf_sec[300];
    const char *p = env("AWS_SHARED_CREDENTIALS_FILE");
    snprintf(cred_path, sizeof cred_path, "%s%s",
             p      ? p
             : home ? home
                    : "/nonexistent",
             p ? "" : "/.aws/credentials");
    p = env("AWS_CONFIG_FILE");
    snprintf(conf_path, sizeof conf_path, "%s%s",
             p      ? p
             : home ? home
                    : "/nonexistent",
             p ? "" : "/.aws/config");
    if (strlen(profile) > 256) {
        snprintf(err, err_cap, "AWS_PROFILE is longer than 256 bytes");
        return -EINVAL;
    }
    snprintf(conf_sec, sizeof conf_sec, "%s%s", strcmp(profile, "default") ? "profile " : "",
             profile);
    char *cred = NULL, *conf = NULL;
    size_t cred_n = 0, conf_n = 0;
    int rc = read_config_file(cred_path, &cred, &cred_n, err, err_cap);
    if (rc == 0) rc = read_config_file(conf_path, &conf, &conf_n, err, err_cap);

    /* Keys: the environment's pair, else the credentials file, else the config file. */
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    if (rc == 0 && id && secret) {
        rc = put(c->access_key_id, sizeof c->access_key_id, id, "AWS_ACCESS_KEY_ID", err, err_cap);
        if (rc == 0)
            rc = put(c->secret_access_key, sizeof c->secret_access_key, secret,
                     "AWS_SECRET_ACCESS_KEY", err, err_cap);
        if (rc == 0 && env("AWS_SESSION_TOKEN"))
            rc = put(c->session_token, sizeof c->session_token, env("AWS_SESSION_TOKEN"),
                     "AWS_SESSION_TOKEN", err, err_cap);
        snprintf(c->source, sizeof c->source, "the environment (AWS_ACCESS_KEY_ID)");
    } else if (rc == 0) {
        const struct {
            const char *text, *path, *sec;
            size_t n;
        } f[2] = { { cred, cred_path, profile, cred_n }, { conf, conf_path, conf_sec, conf_n } };
        for (int k = 0; k < 2 && rc == 0 && !c->access_key_id[0]; k++) {
            int r = ini_put(f[k].text, f[k].n, f[k].sec, "aws_access_key_id", c->access_key_id,
                            sizeof c->access_key_id, f[k].path, err, err_cap);
            if (r <= 0) {
                rc = r;
                continue;
            }
            r = ini_put(f[k].text, f[k].n, f[k].sec, "aws_secret_access_key", c->secret_access_key,
                        sizeof c->secret_access_key, f[k].path, err, err_cap);
            if (r == 0) {
                snprintf(err, err_cap, "%s [%s]: aws_access_key_id without aws_secret_access_key",
                         f[k].path, f[k].sec);
                r = -EINVAL;
            }
            if (r > 0)
                r = ini_put(f[k].text, f[k].n, f[k].sec, "aws_session_token", c->session_token,
                            sizeof c->session_token, f[k].path, err, err_cap);
            rc = r < 0 ? r : 0;
            snprintf(c->source, sizeof c->source, "%.500s [%.90s]", f[k].path, f[k].sec);
        }
        if (rc == 0 && !c->access_key_id[0])
            snprintf(c->source, sizeof c->source,
                     "none: no AWS_ACCESS_KEY_ID, and profile '%.200s' has no keys; requests are "
                     "unsigned",
                     profile);
    }

    /* Region and endpoint: the environment, then the profile in the config file. */
    char style[32] = "";
    const char *r = env("AWS_REGION");
    if (!r) r = env("AWS_DEFAULT_REGION");
    if (rc == 0 && r) rc = put(c->region, sizeof c->region, r, "AWS_REGION", err, err_cap);
    if (rc == 0 && !r)
        rc = ini_put(conf, conf_n, conf_sec, "region", c->region, sizeof c->region, conf_path, err,
                     err_cap) < 0
                 ? -EINVAL
                 : 0;
    if (rc == 0 && !c->region[0]) snprintf(c->region, sizeof c->region, "us-east-1");
    const char *ep = env("AWS_ENDPOINT_URL_S3");
    if (!ep) ep = env("AWS_ENDPOINT_URL");
    if (rc == 0 && ep)
        rc = put(c->endpoint, sizeof c->endpoint, ep, "AWS_ENDPOINT_URL", err, err_cap);
    for (int k = 0; rc == 0 && !ep && k < 2 && !c->endpoint[0]; k++)
        if (ini_put(conf, conf_n, conf_sec, k ? "endpoint_url" : "s3.endpoint_url", c->endpoint,
                    sizeof c->endpoint, conf_path, err, err_cap) < 0)
            rc = -EINVAL;
    if (rc == 0 && ini_put(conf, conf_n, conf_sec, "s3.addressing_style", style, sizeof style,
                           conf_path, err, err_cap) < 0)
        rc = -EINVAL;
    if (rc == 0 && c->endpoint[0] && strncmp(c->endpoint, "http://", 7) &&
        strncmp(c->endpoint, "https://", 8)) {
        snprintf(err, err_cap,
                 "endpoint '%.400s' (AWS_ENDPOINT_URL or endpoint_url) is not an "
                 "http:// or https:// URL",
                 c->endpoint);
        rc = -EINVAL;
    }
    for (size_t l = strlen(c->endpoint); l && c->endpoint[l - 1] == '/'; l--)
        c->endpoint[l - 1] = '\0';
    c->path_style = !strcmp(style, "path") || (strcmp(style, "virtual") && c->endpoint[0]);
    free(cred);
    free(conf);
    if (rc < 0) {
        /* Never leave half a key pair behind for a caller that ignores the error. */
        memset(c, 0, sizeof *c);
        return rc;
    }
    return 0;
}

/* ---- URLs ---- */

/* S3's bucket rules, loosely (legacy names with capitals and '_' still work path-style). */
static bool bucket_ok(const char *b, size_t l)
{
    if (l < 3 || l > 255) return false;
    for (size_t i = 0; i < l; i++) {
        const char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return false;
    }
    return true;
}

static bool dns_bucket(const char *b, size_t l)
{
    if (l > 63 || b[0] == '-' || b[l - 1] == '-') return false;
    for (size_t i = 0; i < l; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return false; /* a dot breaks the wildcard certificate; capitals are not DNS */
    return true;
}

/* Appends s[0, l) RFC 3986-encoded (unreserved kept; '/' kept when keep_slash). */
static int enc(char *out, size_t cap, size_t *at, const char *s, size_t l, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < l; i++) {
        const unsigned char c = (unsigned char)s[i];
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~' ||
                           (keep_slash && c == '/');
        if (*at + (plain ? 1 : 3) >= cap) return -ENAMETOOLONG;
        if (plain) {
            out[(*at)++] = (char)c;
        } else {
            out[(*at)++] = '%';
            out[(*at)++] = hex[c >> 4];
            out[(*at)++] = hex[c & 15];
        }
    }
    out[*at] = '\0';
    return 0;
}

int ffio_s3_encode(const char *s, size_t l, bool keep_slash, char *out, size_t cap)
{
    size_t at = 0;
    if (!cap) return -ENAMETOOLONG;
    out[0] = '\0';
    return enc(out, cap, &at, s, l, keep_slash);
}

int ffio_s3_http_url(const struct ffio_s3_config *c, const char *s3_url, char *out, size_t cap)
{
    if (!c || !out || !cap || !ffio_s3_is_url(s3_url)) return -EINVAL;
    const char *b = s3_url + 5;
    const char *slash = strchr(b, '/');
    const size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    const char *key = slash ? slash + 1 : "";
    if (!bucket_ok(b, bl)) return -EINVAL;
    const bool path = c->path_style || !dns_bucket(b, bl);
    int n;
    if (c->endpoint[0]) {
        const char *hs = strstr(c->endpoint, "://") + 3;
        if (path)
            n = snprintf(out, cap, "%s/%.*s/", c->endpoint, (int)bl, b);
        else
            n = snprintf(out, cap, "%.*s%.*s.%s/", (int)(hs - c->endpoint), c->endpoint, (int)bl, b,
                         hs);
    } else if (path) {
        n = snprintf(out, cap, "https://s3.%s.amazonaws.com/%.*s/", c->region, (int)bl, b);
    } else {
        n = snprintf(out, cap, "https://%.*s.s3.%s.amazonaws.com/", (int)bl, b, c->region);
    }
    if (n < 0 || (size_t)n >= cap) return -ENAMETOOLONG;
    size_t at = (size_t)n;
    return enc(out, cap, &at, key, strlen(key), true);
}

/* ---- what an S3 error code means here ---- */

void ffio_s3_error_of(const char *code, long status, int *err, bool *retry, const char **hint)
{
    static const struct {
        const char *code;
        int err;
        bool retry;
        const char *hint;
    } t[] = {
        { "NoSuchKey", -ENOENT, false, "no object has this key in the bucket" },
        { "NoSuchBucket", -ENOENT, false,
          "the bucket does not exist (or is not at this endpoint)" },
        { "SignatureDoesNotMatch", -EKEYREJECTED, false,
          "the secret key does not belong to this access key id: check "
          "AWS_SECRET_ACCESS_KEY or the profile's aws_secret_access_key" },
        { "InvalidAccessKeyId", -EKEYREJECTED, false,
          "the server knows no such access key id: check AWS_ACCESS_KEY_ID or the profile" },
        { "InvalidToken", -EKEYREJECTED, false,
          "the session token is malformed or not this access key's: check AWS_SESSION_TOKEN" },
        { "ExpiredToken", -EKEYEXPIRED, false,
          "the session token has expired: refresh the temporary credentials" },
        { "TokenRefreshRequired", -EKEYEXPIRED, false,
          "the session token has expired: refresh the temporary credentials" },
        { "RequestTimeTooSkewed", -EACCES, false,
          "this machine's clock is more than 15 minutes from the server's: synchronise it "
          "(chrony or systemd-timesyncd)" },
        { "AccessDenied", -EACCES, false,
          "these credentials are not allowed this request on this object (the bucket's or the "
          "user's policy)" },
        { "AuthorizationHeaderMalformed", -EACCES, false,
          "the request was signed for another region than the bucket's: set AWS_REGION" },
        { "PermanentRedirect", -EACCES, false,
          "the bucket is in another region or at another endpoint: set AWS_REGION or "
          "AWS_ENDPOINT_URL" },
        { "InvalidRange", -ENODATA, false, "the range is past the object's end" },
        { "NoSuchUpload", -ENOENT, false,
          "the multipart upload is gone (aborted, or completed by an earlier attempt)" },
        { "InvalidPart", -EPROTO, false, "S3 does not hold a part the completion names" },
        { "InvalidPartOrder", -EPROTO, false, NULL },
        { "EntityTooSmall", -EINVAL, false, "a part below S3's 5 MiB minimum" },
        { "XAmzContentSHA256Mismatch", -EIO, true, NULL }, /* bytes changed on the way */
        { "BadDigest", -EIO, true, NULL },
        { "RequestTimeout", -EIO, true, NULL },
        { "SlowDown", -EIO, true, NULL },
        { "InternalError", -EIO, true, NULL },
        { "ServiceUnavailable", -EIO, true, NULL },
    };
    *hint = NULL;
    *err = status == 404 || status == 410   ? -ENOENT
           : status == 401 || status == 403 ? -EACCES
           : status == 416                  ? -ENODATA
                                            : -EIO;
    *retry = status >= 500 || status == 408 || status == 429;
    for (size_t k = 0; code && k < sizeof t / sizeof t[0]; k++)
        if (!strcmp(code, t[k].code)) {
            *err = t[k].err;
            *retry = t[k].retry;
            *hint = t[k].hint;
            return;
        }
}
