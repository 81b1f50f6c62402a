/*
 * ffr format primitives: magics, fixed-size structure encoders, error names and the record
 * codecs. Summary of docs/format.md: header (64 B, padded to align) | frames (32 B header +
 * stored bytes, each at a multiple of align) | index (64 B header, 32 B rows, summary heap,
 * metadata) | trailer (3 x 512 B slots, each starting with the same 64 B locator).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "ffr_internal.h"

const uint8_t ffr_magic[8] = { 0x89, 'F', 'F', 'R', '\r', '\n', 0x1a, '\n' };
const uint8_t ffr_index_magic[8] = { 'F', 'F', 'R', 'I', 'N', 'D', 'E', 'X' };
const uint8_t ffr_tail_magic[8] = { 'F', 'F', 'R', 'T', 'A', 'I', 'L', '1' };
const uint8_t ffr_frame_magic[4] = { 'R', 'E', 'C', '1' };

void ffr_header_encode(uint8_t out[FFR_HEADER_SIZE], uint32_t align)
{
    memset(out, 0, FFR_HEADER_SIZE);
    memcpy(out, ffr_magic, 8);
    ffr_wr32(out + 8, FFR_FORMAT_VERSION);
    ffr_wr32(out + 12, 0);
    ffr_wr32(out + 16, align);
    ffr_wr32(out + 20, (uint32_t)ffr_round_up(FFR_HEADER_SIZE, align));
    ffr_wr64(out + 56, ffr_xxh3(out, 56));
}

void ffr_locator_encode(uint8_t out[FFR_LOCATOR_SIZE], const struct ffr_locator *l)
{
    memset(out, 0, FFR_LOCATOR_SIZE);
    memcpy(out, ffr_tail_magic, 8);
    ffr_wr32(out + 8, l->version);
    ffr_wr32(out + 12, l->flags);
    ffr_wr64(out + 16, l->index_offset);
    ffr_wr64(out + 24, l->index_size);
    ffr_wr64(out + 32, l->record_count);
    ffr_wr64(out + 40, l->index_hash);
    ffr_wr64(out + 48, l->file_size);
    ffr_wr64(out + 56, ffr_xxh3(out, 56));
}

void ffr_frame_header_encode(uint8_t out[FFR_FRAME_HEADER_SIZE], int codec, uint32_t stored_len,
                             uint32_t raw_len, uint64_t data_hash, uint64_t number)
{
    memset(out, 0, FFR_FRAME_HEADER_SIZE);
    memcpy(out, ffr_frame_magic, 4);
    out[4] = (uint8_t)codec;
    ffr_wr32(out + 8, stored_len);
    ffr_wr32(out + 12, raw_len);
    ffr_wr64(out + 16, data_hash);
    ffr_wr32(out + 24, (uint32_t)number);
    ffr_wr32(out + 28, (uint32_t)ffr_xxh3(out, 28));
}

const char *ffr_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case FFR_EBADMAGIC:
        return "not an ffr record file or manifest (bad magic)";
    case FFR_EVERSION:
        return "written by a newer ffr format version than this reader knows";
    case FFR_EFLAGS:
        return "uses an ffr feature flag this reader does not know";
    case FFR_ETRUNC:
        return "truncated or extended file: no valid trailer at its end";
    case FFR_ECHECKSUM:
        return "checksum mismatch";
    case FFR_ECORRUPT:
        return "corrupt structure";
    case FFR_EFOREIGN:
        return "an HFAI FFRecord file, not an ffr file (same extension, different format)";
    case FFR_ESHARD:
        return "a shard named by the manifest is missing or differs from it";
    case FFR_ETOOBIG:
        return "size exceeds a limit";
    case FFR_ENOTREG:
        return "not a regular file (a FIFO, device or socket)";
    default:
        break;
    }
    if (rc < 0 && -rc < 1000) return strerror(-rc);
    return "unknown error";
}

int ffr_open_regular(const char *path, int flags)
{
    if (!path) return -EINVAL;
    /* O_NONBLOCK makes the open of a FIFO return at once; it is cleared again for a regular
     * file, where io_uring would otherwise answer -EAGAIN instead of waiting for the disk. */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (fd < 0) return -errno;
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && S_ISDIR(st.st_mode)) rc = -EISDIR;
    if (rc == 0 && !S_ISREG(st.st_mode)) rc = -FFR_ENOTREG;
    if (rc == 0 && !(flags & O_NONBLOCK) &&
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

struct ffr_codec {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
};

int ffr_codec_create(struct ffr_codec **out)
{
    struct ffr_codec *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    *out = c;
    return 0;
}

void ffr_codec_destroy(struct ffr_codec *c)
{
    if (!c) return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c);
}

size_t ffr_encode_bound(size_t len)
{
    const size_t b = ZSTD_compressBound(len);
    return b > len ? b : len;
}

int64_t ffr_encode(struct ffr_codec *c, void *dst, size_t dst_cap, const void *src, size_t src_len,
                   int codec, int level, int *codec_used)
{
    if (!c || (!dst && dst_cap) || (!src && src_len) || !codec_used) return -EINVAL;
    if (src_len > FFR_RECORD_MAX) return -FFR_ETOOBIG;
    if (codec == FFR_CODEC_ZSTD && src_len > 0) {
        if (!c->cctx && !(c->cctx = ZSTD_createCCtx())) return -ENOMEM;
        /* Pledging the size writes it into the frame header, which the reader relies on. */
        ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, level);
        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_contentSizeFlag, 1);
        ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_checksumFlag, 0);
        ZSTD_CCtx_setPledgedSrcSize(c->cctx, src_len);
        const size_t n = ZSTD_compress2(c->cctx, dst, dst_cap, src, src_len);
        if (!ZSTD_isError(n) && n < src_len) {
            *codec_used = FFR_CODEC_ZSTD;
            return (int64_t)n;
        }
        /* Did not shrink (or did not fit in dst_cap): store raw, which the format allows. */
    } else if (codec != FFR_CODEC_RAW && codec != FFR_CODEC_ZSTD) {
        return -EINVAL;
    }
    if (dst_cap < src_len) return -FFR_ETOOBIG;
    if (src_len) memcpy(dst, src, src_len);
    *codec_used = FFR_CODEC_RAW;
    return (int64_t)src_len;
}

int64_t ffr_codec_decode(struct ffr_codec *c, int codec, void *dst, size_t dst_cap, const void *src,
                         size_t src_len, uint32_t raw_len)
{
    if (dst_cap < raw_len) return -FFR_ETOOBIG;
    if (codec == FFR_CODEC_RAW) {
        if (src_len != raw_len) return -FFR_ECORRUPT;
        if (raw_len) memcpy(dst, src, raw_len);
        return raw_len;
    }
    if (codec != FFR_CODEC_ZSTD) return -FFR_ECORRUPT;
    if (!c->dctx && !(c->dctx = ZSTD_createDCtx())) return -ENOMEM;
    /* Exactly one regular zstd frame (not a skippable one), no dictionary, filling stored_len,
     * whose declared content size is raw_len (docs/format.md 4). */
    static const uint8_t zstd_magic[4] = { 0x28, 0xb5, 0x2f, 0xfd };
    if (src_len < 4 || memcmp(src, zstd_magic, 4) != 0) return -FFR_ECORRUPT;
    if (ZSTD_findFrameCompressedSize(src, src_len) != src_len) return -FFR_ECORRUPT;
    if (ZSTD_getDictID_fromFrame(src, src_len) != 0) return -FFR_ECORRUPT;
    const unsigned long long want = ZSTD_getFrameContentSize(src, src_len);
    if (want != raw_len) return -FFR_ECORRUPT;
    const size_t n = ZSTD_decompressDCtx(c->dctx, dst, raw_len, src, src_len);
    if (ZSTD_isError(n) || n != raw_len) return -FFR_ECORRUPT;
    return raw_len;
}

int ffr_say(char *err, size_t cap, int rc, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}
