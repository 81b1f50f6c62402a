/* Manifest parsing (docs/format.md section 7), internal to ffr. */
#ifndef FFR_MANIFEST_H
#define FFR_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define FFR_MANIFEST_MAX        (64u << 20)
#define FFR_MANIFEST_MAX_SHARDS 1000000u

struct ffr_manifest_shard {
    char *file; /* relative to the manifest's directory; no "..", not absolute */
    uint64_t bytes, records, index_hash;
};

struct ffr_manifest {
    uint64_t records;
    uint32_t n_shards;
    struct ffr_manifest_shard *shards;
};

/* 1 when the first bytes say "manifest" rather than "record file". */
int ffr_manifest_sniff(const uint8_t *head, size_t n);

/* Parses manifest text. Returns 0, or -FFR_EBADMAGIC / -FFR_EVERSION / -FFR_ECORRUPT / -ENOMEM
 * with a one-line reason in err. On success free with ffr_manifest_free. */
int ffr_manifest_parse(struct ffr_manifest *m, const uint8_t *text, size_t len, char *err,
                       size_t err_cap);
void ffr_manifest_free(struct ffr_manifest *m);

#endif
