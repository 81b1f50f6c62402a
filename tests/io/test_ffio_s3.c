/*
 * s3:// reading (io/ffio_s3.c, io/ffio_http.c), in three parts.
 *
 * 1. The configuration, without a server: ~/.aws/credentials and ~/.aws/config with profiles,
 *    the environment winning over the files, a "s3 =" sub-section, a value too long refused
 *    (never cut: a cut secret signs wrongly), a FIFO as config file refused at once; the http URL
 *    an s3:// URL is requested at (path-style, virtual-hosted, a dotted bucket, key encoding);
 *    the XML extractor on S3 error bodies.
 * 2. moto_server on loopback (tests/io/s3_moto.py; it checks every SigV4 signature): a single
 *    file's size and a range, a sharded dataset opened by its manifest's s3:// URL and read
 *    record for record equal to the local reader, the node cache filled from s3://, temporary
 *    credentials with their session token; and the errors, each naming its S3 code, bucket and
 *    key: a wrong secret, a wrong session token, a missing key, a missing bucket. Keys from the
 *    environment and from a profile in files. Skips this part, saying so, without moto.
 * 3. A server of this test's own for what moto cannot say: RequestTimeTooSkewed and
 *    ExpiredToken (named, not retried), SlowDown and RequestTimeout (retried, then read), and an
 *    error body of 64 MiB (its <Error> read, the rest dropped: peak RSS asserted). A config file
 *    above its 1 MiB bound is refused with peak RSS asserted too.
 * argv[1]: a scratch directory; argv[2]: tests/io/s3_moto.py.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ffio_internal.h"
#include "moto_util.h"
#include "remote_test_util.h"
#include "tap.h"

static long peak_rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void clear_aws_env(void)
{
    static const char *const v[] = { "AWS_ACCESS_KEY_ID",   "AWS_SECRET_ACCESS_KEY",
                                     "AWS_SESSION_TOKEN",   "AWS_REGION",
                                     "AWS_DEFAULT_REGION",  "AWS_ENDPOINT_URL",
                                     "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
                                     "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
                                     "AWS_CONFIG_FILE" };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        unsetenv(v[k]);
}

static void test_parsers(const char *dir)
{
    char v[256];
    /* INI */
    const char *ini = "# comment\n[default]\naws_access_key_id = AKIA1\n"
                      "aws_secret_access_key=s/e+c=ret \n\n[profile dev]\nregion = eu-west-3\n"
                      "s3 =\n    addressing_style = path\n  endpoint_url = http://h:9\n"
                      "region = eu-north-1\n[other]\nregion=x";
    const size_t n = strlen(ini);
    ok(ffio_ini_get(ini, n, "default", "aws_secret_access_key", v, sizeof v) == 9 &&
           !strcmp(v, "s/e+c=ret"),
       "ini: a value keeps its '=' and loses its spaces: '%s'", v);
    ok(ffio_ini_get(ini, n, "profile dev", "s3.addressing_style", v, sizeof v) > 0 &&
           !strcmp(v, "path"),
       "ini: an indented line under 's3 =' is s3.addressing_style: '%s'", v);
    ok(ffio_ini_get(ini, n, "profile dev", "s3.endpoint_url", v, sizeof v) > 0 &&
           !strcmp(v, "http://h:9"),
       "ini: a second indented line belongs to the same sub-section");
    ok(ffio_ini_get(ini, n, "profile dev", "region", v, sizeof v) > 0 && !strcmp(v, "eu-north-1"),
       "ini: the last assignment in a section wins (botocore): '%s'", v);
    ok(ffio_ini_get(ini, n, "default", "region", v, sizeof v) == -1 &&
           ffio_ini_get(ini, n, "profile", "region", v, sizeof v) == -1,
       "ini: absent keys and sections are -1");
    ok(ffio_ini_get(ini, n, "default", "aws_secret_access_key", v, 5) == -ENAMETOOLONG,
       "ini: a value that does not fit is refused, not cut");
    ok(ffio_ini_get(ini, 43, "default", "aws_access_key_id", v, sizeof v) == 3 && !strcmp(v, "AKI"),
       "ini: a buffer cut in the middle of a line reads only what it holds");

    /* XML */
    const char *err = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>a &lt;b&gt; "
                      "&amp; &#233;&#x263A; &bogus; &#0;</Message><Key/><Resource>r</Resource>";
    size_t pos = 0;
    ok(ffio_xml_next(err, strlen(err), &pos, "Code", v, sizeof v) == 9 && !strcmp(v, "NoSuchKey"),
       "xml: <Code> found");
    pos = 0;
    ok(ffio_xml_next(err, strlen(err), &pos, "Message", v, sizeof v) > 0 &&
           !strcmp(v, "a <b> & \xc3\xa9\xe2\x98\xba &bogus; &#0;"),
       "xml: entities decoded, unknown and NUL ones left as they stand: '%s'", v);
    pos = 0;
    ok(ffio_xml_next(err, strlen(err), &pos, "Key", v, sizeof v) == 0 && !v[0],
       "xml: <Key/> is an empty text");
    pos = 0;
    ok(ffio_xml_next(err, strlen(err) - 5, &pos, "Resource", v, sizeof v) == -1,
       "xml: an element cut before its end tag is not found");
    pos = 0;
    ok(ffio_xml_next(err, strlen(err), &pos, "Cod", v, sizeof v) == -1,
       "xml: a tag is matched whole (<Cod> is not <Code>)");
    pos = 0;
    ok(ffio_xml_next(err, strlen(err), &pos, "Message", v, 4) > 3 && !strcmp(v, "a <"),
       "xml: the text is cut to the buffer and NUL-terminated");

    /* URLs */
    struct ffio_s3_config c = { .region = "eu-west-3" };
    char u[512];
    ok(ffio_s3_http_url(&c, "s3://my-bkt/a b/c+d~e.ffr", u, sizeof u) == 0 &&
           !strcmp(u, "https://my-bkt.s3.eu-west-3.amazonaws.com/a%20b/c%2Bd~e.ffr"),
       "url: AWS, virtual-hosted, the key RFC 3986-encoded with '/' kept: %s", u);
    ok(ffio_s3_http_url(&c, "s3://my.bkt/k", u, sizeof u) == 0 &&
           !strcmp(u, "https://s3.eu-west-3.amazonaws.com/my.bkt/k"),
       "url: a dotted bucket goes path-style (the wildcard certificate does not cover it): %s", u);
    snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:9000");
    c.path_style = true;
    ok(ffio_s3_http_url(&c, "s3://bkt/p/x.ffr", u, sizeof u) == 0 &&
           !strcmp(u, "http://127.0.0.1:9000/bkt/p/x.ffr"),
       "url: a custom endpoint, path-style: %s", u);
    c.path_style = false;
    ok(ffio_s3_http_url(&c, "s3://bkt/x", u, sizeof u) == 0 &&
           !strcmp(u, "http://bkt.127.0.0.1:9000/x"),
       "url: a custom endpoint, virtual-hosted: %s", u);
    ok(ffio_s3_http_url(&c, "s3://b/x", u, sizeof u) == -EINVAL &&
           ffio_s3_http_url(&c, "s3://bad bucket/x", u, sizeof u) == -EINVAL &&
           ffio_s3_http_url(&c, "http://bkt/x", u, sizeof u) == -EINVAL &&
           ffio_s3_http_url(&c, "s3://bkt/x", u, 20) == -ENAMETOOLONG,
       "url: bad bucket names, a non-s3 URL and a small buffer are refused");

    /* The configuration: files, profiles, the environment on top. */
    char cred[600], conf[600], fifo[600], e[700];
    snprintf(cred, sizeof cred, "%s/s3-test-credentials", dir);
    snprintf(conf, sizeof conf, "%s/s3-test-config", dir);
    write_file(cred, "[default]\naws_access_key_id=AKIADEF\naws_secret_access_key=sdef\n"
                     "[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = sdev\n"
                     "aws_session_token = tok\n");
    write_file(conf, "[default]\nregion = us-west-2\n[profile dev]\nregion = eu-central-1\n"
                     "endpoint_url = http://minio:9000/\n[profile cfgonly]\n"
                     "aws_access_key_id=AKIACFG\naws_secret_access_key=scfg\ns3 =\n"
                     "  addressing_style = virtual\n  endpoint_url = https://s3.example\n"
                     "[profile half]\naws_access_key_id=AKIAHALF\n");
    clear_aws_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == 0 && !strcmp(c.access_key_id, "AKIADEF") &&
           !strcmp(c.region, "us-west-2") && !c.endpoint[0] && !c.path_style &&
           strstr(c.source, "[default]"),
       "config: the default profile from both files (%s)", c.source);
    setenv("AWS_PROFILE", "dev", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == 0 && !strcmp(c.access_key_id, "AKIADEV") &&
           !strcmp(c.session_token, "tok") && !strcmp(c.region, "eu-central-1") &&
           !strcmp(c.endpoint, "http://minio:9000") && c.path_style,
       "config: AWS_PROFILE=dev: keys and token from [dev], region and endpoint from "
       "[profile dev], path-style for the custom endpoint");
    setenv("AWS_PROFILE", "cfgonly", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == 0 && !strcmp(c.access_key_id, "AKIACFG") &&
           !strcmp(c.endpoint, "https://s3.example") && !c.path_style &&
           strstr(c.source, "s3-test-config"),
       "config: keys from the config file's profile; s3 = addressing_style = virtual");
    setenv("AWS_PROFILE", "half", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == -EINVAL && strstr(e, "without") &&
           !c.access_key_id[0],
       "config: a key id without its secret is an error naming the file: %s", e);
    setenv("AWS_PROFILE", "dev", 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("AWS_ENDPOINT_URL", "http://env:1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://env-s3:2", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == 0 && !strcmp(c.access_key_id, "AKIAENV") &&
           !c.session_token[0] && !strcmp(c.region, "ap-south-1") &&
           !strcmp(c.endpoint, "http://env-s3:2") && strstr(c.source, "environment"),
       "config: the environment wins: keys (without the profile's token), region, "
       "AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL");
    char big[400];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    setenv("AWS_SECRET_ACCESS_KEY", big, 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == -EINVAL && strstr(e, "AWS_SECRET_ACCESS_KEY"),
       "config: a secret too long is refused, not cut: %s", e);
    clear_aws_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == 0 && !c.access_key_id[0] &&
           strstr(c.source, "unsigned") && !strcmp(c.region, "us-east-1"),
       "config: no keys anywhere is not an error: requests go unsigned, region us-east-1");
    snprintf(fifo, sizeof fifo, "%s/s3-test-fifo", dir);
    unlink(fifo);
    mkfifo(fifo, 0600);
    setenv("AWS_CONFIG_FILE", fifo, 1);
    const time_t t0 = time(NULL);
    ok(ffio_s3_config_load(&c, e, sizeof e) < 0 && strstr(e, fifo) && time(NULL) - t0 < 5,
       "config: a FIFO as config file is refused at once, naming it: %s", e);
    unlink(fifo);
    /* A config file is read whole only up to 1 MiB: one just above is refused, naming it,
     * and reading it costs at most that bound (the 1 MiB buffer) in peak memory. */
    char huge[600];
    snprintf(huge, sizeof huge, "%s/s3-test-huge-config", dir);
    FILE *hf = fopen(huge, "w");
    for (int k = 0; hf && k < (1 << 20) / 16 + 1; k++)
        fputs("# padding 16 B.\n", hf);
    if (hf) fclose(hf);
    setenv("AWS_CONFIG_FILE", huge, 1);
    const long rss0 = peak_rss_kb();
    ok(ffio_s3_config_load(&c, e, sizeof e) == -EINVAL && strstr(e, huge) &&
           strstr(e, "larger than") && peak_rss_kb() - rss0 < 4096,
       "config: a config file above 1 MiB is refused, peak RSS +%ld KiB (bound 4 MiB): %s",
       peak_rss_kb() - rss0, e);
    unlink(huge);
    setenv("AWS_CONFIG_FILE", conf, 1);
    setenv("AWS_ENDPOINT_URL", "minio:9000", 1);
    ok(ffio_s3_config_load(&c, e, sizeof e) == -EINVAL && strstr(e, "minio:9000"),
       "config: an endpoint that is not an http(s) URL is refused: %s", e);
    clear_aws_env();
}

/* ---- part 2: moto ---- */

static struct ffio_http *client(const struct ffio_s3_config *c)
{
    struct ffio_http_opts o;
    ffio_http_opts_default(&o);
    o.retries = 2;
    o.backoff_ms = 10;
    o.s3 = c;
    struct ffio_http *h = NULL;
    ffio_http_create(&o, &h);
    return h;
}

static int64_t read_range(struct ffio_http *h, const char *url, void *dst, uint64_t off,
                          uint64_t len)
{
    struct ffio_http_extent x = { .url = url, .dst = dst, .offset = off, .length = len };
    const int bad = ffio_http_read(h, &x, 1);
    return bad < 0 ? bad : x.res;
}

static void test_moto(const char *dir, const char *script)
{
    char up[600], single[700], sharded[700], why[512] = "";
    snprintf(up, sizeof up, "%s/s3-upload", dir);
    snprintf(single, sizeof single, "%s/single.ffr", up);
    snprintf(sharded, sizeof sharded, "%s/coco.ffr", up);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", up, up);
    if (system(cmd) != 0 || rt_make_dataset(single, 150, 0) < 0 ||
        rt_make_dataset(sharded, 400, 256 << 10) < 0) {
        ok(0, "making the datasets in %s", up);
        return;
    }
    struct moto m = { .to = -1 };
    if (moto_start(&m, script, "ffio-test", up, why, sizeof why)) {
        tap_diag("SKIP the moto part: %s", why);
        if (m.pid > 0) moto_stop(&m);
        return;
    }
    struct ffio_s3_config c;
    moto_s3_config(&m, &c);
    struct ffio_http *h = client(&c);

    /* size and a range of a single file */
    struct stat st;
    stat(single, &st);
    uint64_t size = 0;
    int rc = ffio_http_size(h, "s3://ffio-test/data/single.ffr", &size);
    ok(rc == 0 && size == (uint64_t)st.st_size, "moto: size of a signed object: %" PRIu64 " (%s)",
       size, ffio_http_last_error(h));
    static uint8_t got[70000], want[70000];
    FILE *f = fopen(single, "rb");
    const size_t wn = f && fseek(f, 12345, SEEK_SET) == 0 ? fread(want, 1, 65536, f) : 0;
    if (f) fclose(f);
    const int64_t gn = read_range(h, "s3://ffio-test/data/single.ffr", got, 12345, 65536);
    ok(gn == 65536 && wn == 65536 && !memcmp(got, want, 65536),
       "moto: a signed range read equals the file's bytes (%s)", ffio_http_last_error(h));

    /* a sharded dataset by its manifest's s3:// URL, record for record */
    uint64_t n = 0;
    char err[2048] = "";
    const uint64_t same =
        rt_compare_remote(h, "s3://ffio-test/data/coco.ffr", sharded, &n, err, sizeof err);
    ok(n == 400 && same == 400,
       "moto: a sharded dataset by s3:// URL: %" PRIu64 " of %" PRIu64
       " records equal the local reader's %s",
       same, n, err);

    /* the node cache, filled from s3:// */
    char cdir[700], local[4096];
    snprintf(cdir, sizeof cdir, "%s/s3-cache", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
    (void)!system(cmd);
    struct ffr_cache_source cs;
    ffio_http_cache_source(h, &cs);
    struct ffr_cache_opts co;
    ffr_cache_opts_default(&co);
    co.source = &cs;
    co.durable = 0;
    struct ffr_cache *cache = NULL;
    rc = ffr_cache_open(&cache, cdir, &co, err, sizeof err);
    if (rc == 0)
        rc = ffr_cache_dataset(cache, "s3://ffio-test/data/coco.ffr", local, sizeof local, err,
                               sizeof err);
    struct ffr_reader *cr = NULL, *lr = NULL;
    uint64_t cn = 0, ln = 0;
    if (rc > 0 && ffr_reader_open(&cr, local, NULL, err, sizeof err) == 0)
        cn = ffr_reader_count(cr);
    if (ffr_reader_open(&lr, sharded, NULL, err, sizeof err) == 0) ln = ffr_reader_count(lr);
    const int shards = lr ? (int)ffr_reader_shard_count(lr) : -1;
    ok(rc == shards && shards > 2 && cn == ln && ln == 400,
       "moto: the cache fetches %d of %d shards from s3://, every byte verified; %" PRIu64
       " records %s",
       rc, shards, cn, rc < 0 ? err : "");
    ffr_reader_close(cr);
    ffr_reader_close(lr);
    ffr_cache_close(cache);
    ffio_http_destroy(h);

    /* temporary credentials: the session token is sent and checked */
    struct ffio_s3_config ct = c;
    snprintf(ct.access_key_id, sizeof ct.access_key_id, "%s", m.skey);
    snprintf(ct.secret_access_key, sizeof ct.secret_access_key, "%s", m.ssecret);
    snprintf(ct.session_token, sizeof ct.session_token, "%s", m.token);
    h = client(&ct);
    ok(ffio_http_size(h, "s3://ffio-test/data/single.ffr", &size) == 0 &&
           size == (uint64_t)st.st_size,
       "moto: an assumed role's key, secret and session token read (%s)", ffio_http_last_error(h));
    ffio_http_destroy(h);
    ct.session_token[5] ^= 1;
    h = client(&ct);
    rc = ffio_http_size(h, "s3://ffio-test/data/single.ffr", &size);
    ok(rc == -EKEYREJECTED && strstr(ffio_http_last_error(h), "InvalidToken") &&
           strstr(ffio_http_last_error(h), "AWS_SESSION_TOKEN"),
       "moto: a wrong session token: %s", ffio_http_last_error(h));
    ffio_http_destroy(h);

    /* a wrong secret, a missing key, a missing bucket */
    struct ffio_s3_config cw = c;
    cw.secret_access_key[0] ^= 1;
    h = client(&cw);
    rc = (int)read_range(h, "s3://ffio-test/data/single.ffr", got, 0, 100);
    const char *le = ffio_http_last_error(h);
    ok(rc == -EKEYREJECTED && strstr(le, "SignatureDoesNotMatch") &&
           strstr(le, "bucket ffio-test, key data/single.ffr") &&
           strstr(le, "credentials from the test") && strstr(le, "after 1 attempt"),
       "moto: a wrong secret is named, not retried: %s", le);
    ffio_http_destroy(h);
    h = client(&c);
    rc = ffio_http_size(h, "s3://ffio-test/data/nothere.ffr", &size);
    ok(rc == -ENOENT && strstr(ffio_http_last_error(h), "NoSuchKey") &&
           strstr(ffio_http_last_error(h), "data/nothere.ffr"),
       "moto: a missing key: %s", ffio_http_last_error(h));
    rc = ffio_http_size(h, "s3://no-such-bucket/x.ffr", &size);
    ok(rc == -ENOENT && strstr(ffio_http_last_error(h), "NoSuchBucket"),
       "moto: a missing bucket: %s", ffio_http_last_error(h));
    struct ffio_remote *rm = NULL;
    rc = ffio_remote_open(h, "s3://ffio-test/data/nothere.ffr", NULL, &rm, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "s3://ffio-test/data/nothere.ffr") && strstr(err, "NoSuchKey"),
       "moto: a remote open of a missing key names the URL: %s", err);
    ffio_http_destroy(h);

    /* keys from the environment, then from a profile in files (opts.s3 NULL: loaded) */
    clear_aws_env();
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", m.port);
    setenv("AWS_ACCESS_KEY_ID", m.key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", m.secret, 1);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    h = client(NULL);
    ok(ffio_http_size(h, "s3://ffio-test/data/single.ffr", &size) == 0,
       "moto: keys and endpoint from the environment (%s)", ffio_http_last_error(h));
    ffio_http_destroy(h);
    clear_aws_env();
    char cred[700], conf[700], text[1024];
    snprintf(cred, sizeof cred, "%s/s3-moto-credentials", dir);
    snprintf(conf, sizeof conf, "%s/s3-moto-config", dir);
    snprintf(text, sizeof text, "[moto]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
             m.key, m.secret);
    write_file(cred, text);
    snprintf(text, sizeof text, "[profile moto]\nregion = us-east-1\nendpoint_url = %s\n", ep);
    write_file(conf, text);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    setenv("AWS_PROFILE", "moto", 1);
    h = client(NULL);
    n = 0;
    const uint64_t same2 =
        rt_compare_remote(h, "s3://ffio-test/data/coco.ffr", sharded, &n, err, sizeof err);
    ok(n == 400 && same2 == 400, "moto: profile 'moto' from the two files reads the dataset %s",
       err);
    ffio_http_destroy(h);
    clear_aws_env();
    moto_stop(&m);
}

/* ---- part 3: what moto cannot say ---- */

struct fault {
    int fd, port;
    atomic_int stop, requests;
    const char *mode;
    const uint8_t *data;
    size_t size;
    pthread_t th;
};

static void send_str(int c, const char *s, size_t n)
{
    while (n) {
        const ssize_t k = send(c, s, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void answer_error(int c, int status, const char *code, const char *msg)
{
    char body[600], head[300];
    const int bn = snprintf(body, sizeof body,
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                            "<Message>%s</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>",
                            code, msg);
    const int hn = snprintf(head, sizeof head,
                            "HTTP/1.1 %d Error\r\nContent-Type: application/xml\r\n"
                            "Content-Length: %d\r\nConnection: close\r\n\r\n",
                            status, bn);
    send_str(c, head, (size_t)hn);
    send_str(c, body, (size_t)bn);
}

static void *fault_main(void *arg)
{
    struct fault *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        if (poll(&p, 1, 50) <= 0) continue;
        const int c = accept(s->fd, NULL, NULL);
        if (c < 0) continue;
        char req[4096];
        size_t got = 0;
        while (got < sizeof req - 1) {
            const ssize_t k = recv(c, req + got, sizeof req - 1 - got, 0);
            if (k <= 0) break;
            got += (size_t)k;
            req[got] = '\0';
            if (strstr(req, "\r\n\r\n")) break;
        }
        const int nth = atomic_fetch_add(&s->requests, 1);
        if (!strcmp(s->mode, "hugeerr")) {
            /* an <Error> followed by 64 MiB more body: the client keeps 4 KiB of it */
            static char junk[1 << 16];
            memset(junk, 'x', sizeof junk);
            const char *e = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>";
            char head[300];
            const int hn = snprintf(head, sizeof head,
                                    "HTTP/1.1 403 Forbidden\r\nContent-Length: %zu\r\n"
                                    "Connection: close\r\n\r\n",
                                    strlen(e) + ((size_t)64 << 20));
            send_str(c, head, (size_t)hn);
            send_str(c, e, strlen(e));
            for (int k = 0; k < 1024; k++)
                send_str(c, junk, sizeof junk);
        } else if (!strcmp(s->mode, "skew"))
            answer_error(c, 403, "RequestTimeTooSkewed",
                         "The difference between the request time and the current time is too "
                         "large.");
        else if (!strcmp(s->mode, "expired"))
            answer_error(c, 400, "ExpiredToken", "The provided token has expired.");
        else if (nth < 2)
            answer_error(c, 503, nth ? "RequestTimeout" : "SlowDown",
                         nth ? "Your socket connection to the server was not read from or "
                               "written to within the timeout period."
                             : "Please reduce your request rate.");
        else {
            unsigned long long a = 0, b = s->size - 1;
            const char *r = strcasestr(req, "\r\nRange: bytes=");
            if (r) sscanf(r + 15, "%llu-%llu", &a, &b);
            if (b >= s->size) b = s->size - 1;
            char head[300];
            const int hn = snprintf(head, sizeof head,
                                    "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\n"
                                    "Content-Range: bytes %llu-%llu/%zu\r\nConnection: "
                                    "close\r\n\r\n",
                                    b - a + 1, a, b, s->size);
            send_str(c, head, (size_t)hn);
            send_str(c, (const char *)s->data + a, (size_t)(b - a + 1));
        }
        close(c);
    }
    return NULL;
}

static void test_faults(void)
{
    static uint8_t data[50000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    struct fault s = { .data = data, .size = sizeof data, .mode = "skew" };
    int port = 0;
    s.fd = rt_listen(16, &port);
    if (s.fd < 0 || pthread_create(&s.th, NULL, fault_main, &s)) {
        ok(0, "the fault server starts");
        return;
    }
    struct ffio_s3_config c;
    rt_s3_config(&c, port);
    static uint8_t got[50000];
    struct ffio_http *h = client(&c);
    int rc = (int)read_range(h, "s3://bkt/clock.ffr", got, 0, 1000);
    ok(rc == -EACCES && strstr(ffio_http_last_error(h), "RequestTimeTooSkewed") &&
           strstr(ffio_http_last_error(h), "clock") && atomic_load(&s.requests) == 1,
       "a skewed clock is named and not retried: %s", ffio_http_last_error(h));
    s.mode = "expired";
    atomic_store(&s.requests, 0);
    rc = (int)read_range(h, "s3://bkt/tok.ffr", got, 0, 1000);
    ok(rc == -EKEYEXPIRED && strstr(ffio_http_last_error(h), "ExpiredToken") &&
           strstr(ffio_http_last_error(h), "refresh") && atomic_load(&s.requests) == 1,
       "an expired session token is named and not retried: %s", ffio_http_last_error(h));
    s.mode = "hugeerr";
    const long rss0 = peak_rss_kb();
    rc = (int)read_range(h, "s3://bkt/big-error.ffr", got, 0, 1000);
    ok(rc == -EACCES && strstr(ffio_http_last_error(h), "AccessDenied") &&
           peak_rss_kb() - rss0 < 8192,
       "a 64 MiB error body: its <Error> is read, the rest dropped; peak RSS +%ld KiB (bound "
       "8 MiB): %s",
       peak_rss_kb() - rss0, ffio_http_last_error(h));
    s.mode = "slow";
    atomic_store(&s.requests, 0);
    struct ffio_http_stats st0, st1;
    ffio_http_stats(h, &st0);
    rc = (int)read_range(h, "s3://bkt/slow.ffr", got, 1000, 30000);
    ffio_http_stats(h, &st1);
    ok(rc == 30000 && !memcmp(got, data + 1000, 30000) && st1.retries - st0.retries == 2,
       "SlowDown and RequestTimeout are retried, then the range reads (%" PRIu64 " retries)",
       st1.retries - st0.retries);
    ffio_http_destroy(h);
    atomic_store(&s.stop, 1);
    pthread_join(s.th, NULL);
    close(s.fd);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SCRATCH_DIR s3_moto.py\n", argv[0]);
        return 2;
    }
    if (!ffio_http_available()) tap_skip_all("built without libcurl");
    signal(SIGPIPE, SIG_IGN);
    test_parsers(argv[1]);
    test_faults();
    test_moto(argv[1], argv[2]);
    return tap_done();
}
