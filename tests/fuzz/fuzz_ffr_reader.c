/*
 * Fuzz target for the ffr reader: arbitrary bytes are opened as a record file, and whatever opens
 * is read, decoded as detection samples and verified. Nothing may crash, leak or read out of
 * bounds; errors are the expected outcome for almost every input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "det.h"
#include "ffr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    struct ffr_reader_opts o;
    ffr_reader_opts_default(&o);
    o.max_record_bytes = 1u << 20; /* keep allocations small under the fuzzer */
    struct ffr_reader *r;
    char err[256];
    if (ffr_reader_open_fd(&r, fd, "fuzz.ffr", &o, err, sizeof err) == 0) {
        struct ffr_decoder *d;
        if (ffr_decoder_create(&d) == 0) {
            const uint64_t n = ffr_reader_count(r);
            for (uint64_t i = 0; i < n && i < 64; i++) {
                struct ffr_record_info info;
                if (ffr_reader_info(r, i, &info) < 0) continue;
                struct det_summary sum;
                det_summary_decode(info.summary, info.summary_len, &sum);
                void *buf = malloc(info.raw_len + 1);
                if (!buf) continue;
                const int64_t got = ffr_reader_read(r, d, i, buf, info.raw_len);
                struct det_sample s;
                if (got >= 0 && det_decode(buf, (size_t)got, &s) == 0 &&
                    s.pixel_format != DET_JPEG) {
                    uint8_t *px = malloc(s.pixel_bytes + 1);
                    if (px) det_pixels(&s, px, s.pixel_bytes);
                    free(px);
                }
                free(buf);
            }
            ffr_reader_verify_all(r, NULL, NULL);
            ffr_decoder_destroy(d);
        }
        size_t mlen;
        ffr_reader_metadata(r, &mlen);
        ffr_reader_close(r);
    }
    close(fd);
    return 0;
}
