/*
 * The letterboxed validation inputs of all 128 coco128 images, byte for byte against a
 * python3-opencv recomputation of val.py's preprocessing (make_val_refs.py: load_image with
 * INTER_AREA / INTER_LINEAR at int(w0 * r) x int(h0 * r), the rect batch shapes from numpy's
 * argsort, letterbox(auto=False, scaleup=False)), at 640 and 320: yolo-pack --interp val, then
 * the validation loader (rect, batch 32, pad 0.5): each image's size and the CRC-32 of its
 * RGB bytes equal the reference's "crc IMG INDEX H W CRC" line.
 * Usage: test_val_inputs YOLO_PACK SHARED_DIR REF (skips, 77, without SHARED_DIR's coco128)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ffr.h"
#include "loader.h"
#include "run_testutil.h"
#include "crc32_testutil.h"
#include "tap.h"

/* CRC-32 (IEEE 802.3, reflected 0xEDB88320), as Python's zlib.crc32. */

static void check_size(const char *pack, const char *shared, const char *ref, int img)
{
    char path[600], err[512] = "";
    snprintf(path, sizeof path, "%s/c%d.ffr", dir, img);
    if (!ok(run("%s %s/datasets/coco128 -o %s --size %d --interp val -q", pack, shared, path,
                img) == 0,
            "yolo-pack coco128 at %d, --interp val", img))
        return;
    struct ffr_reader *r = NULL;
    struct trn_loader *l = NULL;
    struct trn_loader_opts o;
    trn_loader_opts_default(&o);
    o.mode = TRN_LOADER_VAL;
    o.img_size = img;
    o.batch_size = 32;
    o.rect = true;
    o.rect_pad = 0.5;
    o.stride = 32;
    o.workers = 2;
    o.io.io.direct = FFIO_DIRECT_OFF;
    int rc = ffr_reader_open(&r, path, NULL, err, sizeof err);
    if (rc == 0) rc = trn_loader_create(r, &o, &l, err, sizeof err);
    char *text = slurp(ref, NULL);
    int same = 0, seen = 0, size_ok = 0;
    /* a rect batch may be up to img + 32 (pad 0.5) on a side */
    uint8_t *hwc = malloc((size_t)(img + 64) * (img + 64) * 3);
    for (int b = 0; rc == 0 && b < 4; b++) {
        struct trn_batch bt;
        if ((rc = trn_loader_next(l, &bt)) < 0) break;
        const size_t plane = (size_t)bt.height * bt.width;
        if (bt.height > img + 64 || bt.width > img + 64) {
            rc = -EINVAL;
            break;
        }
        for (int j = 0; j < bt.n; j++) {
            const uint8_t *src = (const uint8_t *)bt.images + (size_t)j * 3 * plane;
            for (size_t i = 0; i < plane; i++)
                for (int c = 0; c < 3; c++)
                    hwc[3 * i + c] = src[c * plane + i];
            const uint32_t crc = test_crc32(hwc, 3 * plane);
            char key[64];
            snprintf(key, sizeof key, "crc %d %" PRIu64 " ", img, bt.info[j].index);
            const char *at = text ? strstr(text, key) : NULL;
            int h = 0, w = 0;
            unsigned want = 0;
            if (at && sscanf(at + strlen(key), "%d %d %x", &h, &w, &want) == 3) {
                size_ok += h == bt.height && w == bt.width;
                same += h == bt.height && w == bt.width && want == crc;
                if (want != crc && seen + 1 - same <= 5)
                    tap_diag("%d: record %" PRIu64 " (%dx%d) differs", img, bt.info[j].index, w, h);
            }
            seen++;
        }
    }
    ok(rc == 0 && seen == 128, "%d: the loader gave the 128 images (%s)", img, err);
    ok(size_ok == 128, "%d: every image at val.py's letterboxed size (%d of 128)", img, size_ok);
    ok(same == 128, "%d: every image's bytes equal val.py's (%d of 128 CRC-32s)", img, same);
    free(hwc);
    free(text);
    trn_loader_destroy(l);
    ffr_reader_close(r);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        printf("usage: test_val_inputs YOLO_PACK SHARED_DIR REF\n");
        return 99;
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/datasets/coco128", argv[2]);
    if (access(p, R_OK)) tap_skip_all("no ../shared/datasets/coco128");
    snprintf(dir, sizeof dir, "/tmp/test_val_inputs_XXXXXX");
    if (!mkdtemp(dir)) return 99;
    check_size(argv[1], argv[2], argv[3], 640);
    check_size(argv[1], argv[2], argv[3], 320);
    const int rc = tap_done();
    run("rm -rf %s", dir);
    return rc;
}
