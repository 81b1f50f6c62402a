#!/usr/bin/env python3
"""Writes a grey PNG of W x H pixels whose rows are all one value: a small file that decodes to
W * H * 3 bytes of RGB (issue 44: a 746 KB PNG of 16000 x 16000 is 768 MB decoded).

  make_big_png.py OUT.png W H"""
import struct
import sys
import zlib


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def main():
    out, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    row = b"\x00" + bytes([0x80]) * w  # filter None, mid grey
    z = zlib.compressobj(9)
    parts = [z.compress(row * 256) for _ in range(h // 256)]
    parts.append(z.compress(row * (h % 256)))
    parts.append(z.flush())
    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", b"".join(parts)))
        f.write(chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
