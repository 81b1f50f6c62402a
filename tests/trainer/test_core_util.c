/*
 * core/ errors.h and util.h: trn_strerror names every range (errno, ffr, kern, each pinned
 * trainer code, unknown codes); trn_seterr / trn_fail truncate and tolerate no buffer; trn_grow
 * doubles, keeps the array on overflow; trn_read_file reads whole regular files and refuses
 * FIFOs, directories, missing and oversized files with a line naming the file;
 * trn_yaml_scalar_is compares by length.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "ffr.h"
#include "kern.h"
#include "tap.h"
#include "util.h"

static void test_strerror(void)
{
    ok(!strcmp(trn_strerror(0), "success") && !strcmp(trn_strerror(5), "success"), "rc >= 0");
    ok(!strcmp(trn_strerror(-ENOENT), strerror(ENOENT)), "errno: %s", trn_strerror(-ENOENT));
    ok(!strcmp(trn_strerror(-FFR_ECORRUPT), ffr_strerror(-FFR_ECORRUPT)), "ffr: %s",
       trn_strerror(-FFR_ECORRUPT));
    ok(!strcmp(trn_strerror(-KERN_EWORKSPACE), kern_strerror(-KERN_EWORKSPACE)), "kern: %s",
       trn_strerror(-KERN_EWORKSPACE));
    static const int codes[] = { TRN_MODEL_ESYNTAX, TRN_MODEL_ESCHEMA,    TRN_MODEL_EUNSUPPORTED,
                                 TRN_MODEL_ESHAPE,  TRN_LOSS_ETARGET,     TRN_CKPT_EBAD,
                                 TRN_PT_EZIP,       TRN_PT_ECRC,          TRN_PT_EPICKLE,
                                 TRN_PT_ELIMIT,     TRN_PT_EUNSUPPORTED,  TRN_PT_ESTRUCT,
                                 TRN_PT_EMISMATCH,  TRN_EXPORT_EPROTOBUF, TRN_EXPORT_EMODEL };
    const int n = (int)(sizeof codes / sizeof codes[0]);
    int named = 0, distinct = 0;
    for (int i = 0; i < n; i++) {
        const char *m = trn_strerror(-codes[i]);
        named += strcmp(m, "unknown error code") != 0;
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= !strcmp(m, trn_strerror(-codes[j]));
        distinct += !dup;
    }
    is_int(named, n, "every pinned trainer code has a message");
    is_int(distinct, n, "and no two share one");
    ok(!strcmp(trn_strerror(-4650), "unknown error code"), "a free code in a range is unknown");
    ok(!strcmp(trn_strerror(-7777), "unknown error code"), "a code outside every range too");
}

static void test_seterr(void)
{
    char e[8] = "xxxxxxx";
    trn_seterr(e, sizeof e, "%s %d", "abcdef", 12345);
    ok(!strcmp(e, "abcdef "), "truncated to the buffer: '%s'", e);
    trn_seterr(NULL, 16, "%d", 1);
    trn_seterr(e, 0, "%d", 1);
    ok(!strcmp(e, "abcdef "), "NULL buffer or 0 capacity: nothing written");
    char f[64];
    is_int(trn_fail(f, sizeof f, -EINVAL, "bad %s", "thing"), -EINVAL, "trn_fail returns rc");
    ok(!strcmp(f, "bad thing"), "and writes the line");
}

static void test_grow(void)
{
    int *a = NULL;
    size_t cap = 0;
    is_int(trn_grow((void **)&a, &cap, 1, sizeof *a), 0, "first growth");
    ok(cap >= 1 && a, "capacity %zu", cap);
    const size_t c1 = cap;
    is_int(trn_grow((void **)&a, &cap, c1, sizeof *a), 0, "need <= cap: no-op");
    is_int((long long)cap, (long long)c1, "capacity unchanged");
    is_int(trn_grow((void **)&a, &cap, 1000, sizeof *a), 0, "growth to 1000");
    ok(cap >= 1000 && cap < 2048, "doubling: capacity %zu", cap);
    for (int i = 0; i < 1000; i++)
        a[i] = i;
    int *keep = a;
    const size_t keep_cap = cap;
    is_int(trn_grow((void **)&a, &cap, SIZE_MAX / 2, 16), -ENOMEM, "overflowing size: -ENOMEM");
    ok(a == keep && cap == keep_cap && a[999] == 999, "the array is left as it was");
    free(a);
}

static void test_read_file(const char *dir)
{
    char path[512], e[600];
    snprintf(path, sizeof path, "%s/plain.txt", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 100000; i++)
        fputc('a' + i % 26, f);
    fclose(f);
    char *buf = NULL;
    size_t len = 0;
    is_int(trn_read_file(path, 1 << 20, &buf, &len, e, sizeof e), 0, "a 100000-byte file");
    ok(len == 100000 && buf[len] == '\0' && buf[26] == 'a' && buf[99999] == 'a' + 99999 % 26,
       "all bytes, NUL-terminated");
    free(buf);
    int rc = trn_read_file(path, 99999, &buf, &len, e, sizeof e);
    is_int(rc, -EFBIG, "one byte over max: -EFBIG");
    ok(strstr(e, path) && strstr(e, "larger than 99999"), "the line names the file: %s", e);

    snprintf(path, sizeof path, "%s/empty.txt", dir);
    fclose(fopen(path, "wb"));
    is_int(trn_read_file(path, 10, &buf, &len, e, sizeof e), 0, "an empty file");
    ok(len == 0 && buf && buf[0] == '\0', "is an empty string");
    free(buf);

    snprintf(path, sizeof path, "%s/fifo", dir);
    ok(mkfifo(path, 0600) == 0, "mkfifo");
    rc = trn_read_file(path, 10, &buf, &len, e, sizeof e);
    is_int(rc, -FFR_ENOTREG, "a FIFO is refused at once (no wait for a writer)");
    ok(strstr(e, path) != NULL, "%s", e);
    is_int(trn_read_file(dir, 10, &buf, &len, e, sizeof e), -EISDIR, "a directory: -EISDIR");
    snprintf(path, sizeof path, "%s/missing", dir);
    is_int(trn_read_file(path, 10, &buf, &len, e, sizeof e), -ENOENT, "a missing file");
    ok(strstr(e, "missing") && strstr(e, strerror(ENOENT)), "%s", e);
}

static void test_yaml(void)
{
    yaml_node_t n;
    memset(&n, 0, sizeof n);
    n.type = YAML_SCALAR_NODE;
    n.data.scalar.value = (yaml_char_t *)"names\0x";
    n.data.scalar.length = 7;
    ok(!trn_yaml_scalar_is(&n, "names"), "a scalar with a NUL inside is not its prefix");
    n.data.scalar.length = 5;
    ok(trn_yaml_scalar_is(&n, "names"), "equal bytes and length");
    n.type = YAML_SEQUENCE_NODE;
    ok(!trn_yaml_scalar_is(&n, "names") && !trn_yaml_scalar_is(NULL, "names"),
       "not a scalar, or no node: false");
}

int main(void)
{
    char dir[] = "/tmp/test_core_util.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_strerror();
    test_seterr();
    test_grow();
    test_read_file(dir);
    test_yaml();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    return tap_done();
}
