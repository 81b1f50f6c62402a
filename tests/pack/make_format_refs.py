#!/usr/bin/python3
"""Write tests/pack/data/fmt/: small PNG, BMP and WebP files of every kind pack_image_decode
reads, and refs.txt with what cv2.imread(path, IMREAD_COLOR) gives for each (BGR -> RGB), for
tests/pack/test_image_formats.c: "name width height crc32" (zlib.crc32 of the RGB bytes).

Run with Debian's python3-opencv, numpy and PIL: /usr/bin/python3 tests/pack/make_format_refs.py
The pixels are a closed-form pattern (no RNG); the files are what these libraries write.
"""
import os
import sys
import zlib

import cv2
import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fmt")


def pattern(w, h, c):
    y, x, k = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    return ((x * 37 + y * 11 + k * 83 + (x * y) % 7 * 19) % 256).astype(np.uint8)


def main():
    os.makedirs(OUT, exist_ok=True)
    w, h = 37, 23
    bgr = pattern(w, h, 3)
    files = []

    def cvw(name, img, params=()):
        cv2.imwrite(os.path.join(OUT, name), img, list(params))
        files.append(name)

    def pilw(name, img, **kw):
        img.save(os.path.join(OUT, name), **kw)
        files.append(name)

    cvw("rgb.png", bgr)
    cvw("rgba.png", np.dstack([bgr, pattern(w, h, 1)]))
    cvw("gray.png", bgr[:, :, 0])
    cvw("rgb16.png", (bgr.astype(np.uint16) * 257 + 99).astype(np.uint16))
    cvw("gray16.png", (bgr[:, :, 1].astype(np.uint16) * 250 + 3).astype(np.uint16))
    pilw("pal.png", Image.fromarray(bgr[:, :, ::-1]).convert("P", palette=Image.ADAPTIVE,
                                                              colors=16))
    pilw("gray2.png", Image.fromarray((bgr[:, :, 2] // 64 * 85).astype(np.uint8)).convert("L"),
         bits=2)
    pilw("interlaced.png", Image.fromarray(bgr[:, :, ::-1]), interlace=1)
    cvw("rgb.bmp", bgr)
    cvw("rgba.bmp", np.dstack([bgr, pattern(w, h, 1)]))
    cvw("gray.bmp", bgr[:, :, 0])
    pilw("topdown_src.bmp", Image.fromarray(bgr[:, :, ::-1]))
    cvw("lossless.webp", bgr, (cv2.IMWRITE_WEBP_QUALITY, 101))
    cvw("lossy.webp", bgr, (cv2.IMWRITE_WEBP_QUALITY, 80))
    cvw("alpha.webp", np.dstack([bgr, pattern(w, h, 1)]), (cv2.IMWRITE_WEBP_QUALITY, 101))
    # a top-down BMP: PIL's file with the height negated and the rows reversed
    p = os.path.join(OUT, "topdown_src.bmp")
    b = bytearray(open(p, "rb").read())
    off = int.from_bytes(b[10:14], "little")
    stride = (w * 3 + 3) // 4 * 4
    rows = [b[off + i * stride: off + (i + 1) * stride] for i in range(h)]
    b[22:26] = (-h).to_bytes(4, "little", signed=True)
    b[off:off + stride * h] = b"".join(reversed(rows))
    open(os.path.join(OUT, "topdown.bmp"), "wb").write(bytes(b))
    files.append("topdown.bmp")
    with open(os.path.join(OUT, "refs.txt"), "w") as f:
        f.write("# cv2.imread(IMREAD_COLOR) -> RGB of each file (OpenCV %s): name w h crc32\n"
                % cv2.__version__)
        for name in files:
            im = cv2.imread(os.path.join(OUT, name), cv2.IMREAD_COLOR)
            rgb = np.ascontiguousarray(im[:, :, ::-1])
            f.write("%s %d %d %08x\n" % (name, rgb.shape[1], rgb.shape[0],
                                         zlib.crc32(rgb.tobytes())))
    print("wrote", OUT, len(files), "files")


if __name__ == "__main__":
    sys.exit(main())
