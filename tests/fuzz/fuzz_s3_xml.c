/*
 * Fuzz target for the XML element extractor that reads S3's answers (io/ffio_s3.c,
 * ffio_xml_next / ffio_xml_span): arbitrary bytes are searched for the tags S3 answers carry.
 * Every span found must lie inside the input and move the position forward; the decoded text
 * is never longer than the raw one plus what numeric entities expand to (4 bytes for at least
 * 4 raw ones), and it is NUL-terminated within the buffer. The same bytes as a ListObjectsV2
 * answer (ffio_s3_list_parse): at most `max` objects, each key shorter than the input, a token
 * NUL-terminated when more pages are claimed. Nothing may crash, leak or read out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ffio_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tags[] = { "Error",    "Code", "Message",     "Contents",
                                        "Key",      "Size", "IsTruncated", "NextContinuationToken",
                                        "UploadId", "ETag" };
    const char *xml = (const char *)data;
    for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
        size_t pos = 0, b, l;
        for (int k = 0; k < 64; k++) {
            const size_t before = pos;
            if (ffio_xml_span(xml, size, &pos, tags[t], &b, &l) < 0) break;
            if (b > size || l > size - b || pos <= before || pos > size) abort();
            /* the text's own nested lookups stay inside it */
            size_t p2 = 0, b2, l2;
            if (ffio_xml_span(xml + b, l, &p2, "Key", &b2, &l2) == 0 && (b2 + l2 > l)) abort();
        }
        char out[64];
        pos = 0;
        const int n = ffio_xml_next(xml, size, &pos, tags[t], out, sizeof out);
        if (n >= 0 && (strlen(out) >= sizeof out || (size_t)n > size)) abort();
    }
    struct ffio_s3_object *o = NULL;
    size_t n = 0;
    char token[128];
    bool more = false;
    const int rc = ffio_s3_list_parse(xml, size, &o, &n, 50, token, sizeof token, &more);
    if (n > 50 || (rc == 0 && more && strlen(token) >= sizeof token)) abort();
    for (size_t i = 0; i < n; i++)
        if (strlen(o[i].key) > size) abort();
    ffio_s3_objects_free(o, n);
    return 0;
}
