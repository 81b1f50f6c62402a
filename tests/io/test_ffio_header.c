/*
 * ffio.h compiles on its own (it is included first, before anything else) and its small pure
 * helpers behave as documented: option defaults, engine names, error strings, batch sizing.
 */
#include "ffio.h"
#include "ffio.h" /* the include guard holds */

#include "tap.h"

#include <errno.h>
#include <string.h>

int main(void)
{
    struct ffio_opts o;
    memset(&o, 0x5a, sizeof o);
    ffio_opts_default(&o);
    is_int(o.engine, FFIO_ENGINE_AUTO, "default engine is auto");
    is_int(o.direct, FFIO_DIRECT_AUTO, "default O_DIRECT mode is auto");
    is_int(o.queue_depth, 64, "default queue depth 64");
    is_int(o.direct_align, 4096, "default alignment 4096");
    ok(o.bounce_bytes >= 2u * o.direct_align && o.bounce_bytes % o.direct_align == 0,
       "default bounce size is a valid multiple of the alignment");
    ok(o.register_files && o.register_buffers && !o.sqpoll && !o.force_no_uring && !o.log,
       "default switches");

    const char *names[] = { "auto", "uring", "pread", "mmap" };
    for (int k = 0; k < 4; k++) {
        enum ffio_engine_kind got = FFIO_ENGINE_MMAP;
        ok(!strcmp(ffio_engine_kind_name((enum ffio_engine_kind)k), names[k]) &&
               ffio_engine_kind_parse(names[k], &got) == 0 && (int)got == k,
           "engine name %s round-trips", names[k]);
    }
    enum ffio_engine_kind dummy;
    is_int(ffio_engine_kind_parse("io_uring", &dummy), -EINVAL, "unknown engine name rejected");
    is_int(ffio_engine_kind_parse(NULL, &dummy), -EINVAL, "NULL engine name rejected");

    ok(strstr(ffio_strerror(-ENODATA), "end of file") != NULL, "ENODATA reads as end of file");
    ok(!strcmp(ffio_strerror(-EIO), strerror(EIO)), "other codes read as strerror");
    ok(!strcmp(ffio_strerror(0), "success"), "0 is success");
    ok(ffio_strerror(-99999) != NULL, "unknown codes still give a string");

    const struct ffio_extent ext[3] = { { .length = 1 }, { .length = 4096 }, { .length = 4097 } };
    is_int(ffio_batch_bytes(ext, 3, 4096), 4096 + 4096 + 8192, "batch bytes at 4096");
    is_int(ffio_batch_bytes(ext, 3, 1), 1 + 4096 + 4097, "batch bytes unaligned");
    const struct ffio_extent huge[2] = { { .length = UINT64_MAX / 2 + 10 },
                                         { .length = UINT64_MAX / 2 } };
    ok(ffio_batch_bytes(huge, 2, 4096) == SIZE_MAX, "batch bytes saturates");

    struct ffio_engine *e = (struct ffio_engine *)&o;
    o.queue_depth = 0;
    is_int(ffio_engine_create(&o, &e), -EINVAL, "queue depth 0 rejected");
    ok(e == NULL, "failed create leaves *out NULL");
    ffio_opts_default(&o);
    o.direct_align = 3000;
    is_int(ffio_engine_create(&o, &e), -EINVAL, "alignment not a power of two rejected");
    ffio_opts_default(&o);
    o.bounce_bytes = 4096;
    is_int(ffio_engine_create(&o, &e), -EINVAL, "bounce buffer below two blocks rejected");
    ffio_engine_destroy(NULL);
    ffio_pinned_free(NULL);
    ok(1, "destroy(NULL) and pinned_free(NULL) are accepted");
    return tap_done();
}
