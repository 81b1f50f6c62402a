#!/usr/bin/python3
"""Generate the OpenCV reference data for tests/pack/test_image.c.

Run with Debian's python3-opencv (apt-get install python3-opencv; /usr/bin/python3, not a
pyenv python):

    /usr/bin/python3 tests/pack/make_image_refs.py [OUTDIR]   (default: tests/pack/data)

Every input is a small synthetic image (a closed-form pattern, no RNG, so the pixels are the
same on every machine), encoded as JPEG by OpenCV or libjpeg-turbo, sometimes edited (EXIF
blocks, truncation, trailing bytes, CMYK variants). The expected output of each case is what
ultralytics' load_image() computes: cv2.imread, then cv2.resize to (int(w0*r), int(h0*r)) with
r = S / max(h0, w0) (v7.0's rounding; op loadceil: math.ceil, later master's), converted BGR ->
RGB and stored raw. image_refs.txt lists the cases:

    name jpeg op arg interp out_w out_h expected orientation warnings

op is decode (arg -), load or loadceil (arg = S, the long side) or resize (arg = WxH, explicit size after
decoding); interp is linear or area (- for decode); orientation is what OpenCV applied
(inferred by comparing with the unrotated decode, -1 when not applicable); warnings is the
PACK_IMAGE_WARN_* mask the case is built to trigger. image_sizes.txt lists ultralytics' size
rule on tricky shapes: w0 h0 S w h val_interp w_ceil h_ceil (val_interp: the augment=False
choice; w, h with int(), w_ceil, h_ceil with math.ceil; sides at least 1, since ultralytics
refuses images under 10 pixels before load_image).

The JPEG bytes are part of the data, so a different libjpeg version only changes which bytes are
stored, not the test's validity. Total size is kept under ~150 KB.
"""
import math
import os
import struct
import sys
import ctypes
import ctypes.util

import cv2
import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")
PREFIX = "img_"

WARN_NO_EOI, WARN_DATA, WARN_EXIF = 1, 2, 4


def pattern(w, h, seed, grey=False):
    """A photo-like BGR (or grey) uint8 image: smooth waves, an edge, and hashed texture."""
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    base = []
    for c in range(3):
        v = (128
             + 90 * np.sin(x * (0.21 + 0.05 * c) + seed + c) * np.cos(y * (0.17 + 0.03 * c))
             + 40 * ((x + 2 * y + 7 * seed) % 23 < 11)
             + (((x * 73856093) ^ (y * 19349663) ^ ((seed + c) * 83492791)) % 17) - 8)
        base.append(np.clip(v, 0, 255).astype(np.uint8))
    img = np.dstack(base)
    if grey:
        return img[:, :, 1].copy()
    return img


def encode(img, quality=90, extra=()):
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality, *extra])
    assert ok
    return bytes(buf)


def write(name, data):
    with open(os.path.join(OUT, PREFIX + name), "wb") as f:
        f.write(data)
    return PREFIX + name


def cv_read(jpeg_name, messages=None):
    """cv2.imread, collecting what libjpeg prints on stderr (its warnings) into `messages`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.path.join(OUT, ".stderr"), "w+b") as cap:
        os.dup2(cap.fileno(), 2)
        try:
            img = cv2.imread(os.path.join(OUT, jpeg_name), cv2.IMREAD_COLOR)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        cap.seek(0)
        text = cap.read().decode("latin-1")
    os.remove(os.path.join(OUT, ".stderr"))
    assert img is not None, jpeg_name
    if messages is not None:
        messages.append(text)
    return img


def target(w0, h0, s, rnd="int"):
    r = s / max(h0, w0)
    if r == 1:
        return w0, h0, r
    f = math.ceil if rnd == "ceil" else int
    return max(1, f(w0 * r)), max(1, f(h0 * r)), r


CV_INTERP = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA}

cases = []


def add_case(name, jpeg_name, op, arg, interp, orientation=-1, warnings=0):
    messages = []
    img = cv_read(jpeg_name, messages)
    if messages[0].strip():  # libjpeg warned: PACK_IMAGE_WARN_DATA
        warnings |= WARN_DATA
    h0, w0 = img.shape[:2]
    if op in ("load", "loadceil"):
        w, h, r = target(w0, h0, arg, "ceil" if op == "loadceil" else "int")
        if r != 1:
            img = cv2.resize(img, (w, h), interpolation=CV_INTERP[interp])
    elif op == "resize":
        w, h = arg
        img = cv2.resize(img, (w, h), interpolation=CV_INTERP[interp])
        arg = "%dx%d" % (w, h)
    else:
        arg, interp = "-", "-"
    rgb = np.ascontiguousarray(img[:, :, ::-1])
    exp = write(name + ".rgb", rgb.tobytes())
    cases.append("%s %s %s %s %s %d %d %s %d %d" % (name, jpeg_name, op, arg, interp,
                                                  rgb.shape[1], rgb.shape[0], exp, orientation,
                                                  warnings))


# ---- EXIF helpers ---------------------------------------------------------------------------

def tiff_block(entries, big_endian=False, ifd_offset=8, tail=b""):
    """A TIFF header + IFD0 with raw 12-byte entries (tag, type, count, value bytes)."""
    e = ">" if big_endian else "<"
    out = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, ifd_offset)
    out += b"\0" * (ifd_offset - 8)
    out += struct.pack(e + "H", len(entries))
    for tag, typ, count, value in entries:
        out += struct.pack(e + "HHI", tag, typ, count) + value
    out += struct.pack(e + "I", 0) + tail
    return out


def short_value(v, big_endian=False):
    return struct.pack(">HH" if big_endian else "<HH", v, 0)


def long_value(v, big_endian=False):
    return struct.pack(">I" if big_endian else "<I", v)


def app1(payload):
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_segments(jpeg, *segments):
    assert jpeg[:2] == b"\xff\xd8"
    return jpeg[:2] + b"".join(segments) + jpeg[2:]


def orientation_of(img, base):
    """Which OpenCV EXIF transform turns the unrotated decode `base` into `img` (0 if none)."""
    t = cv2.transpose(base)
    candidates = {1: base, 2: cv2.flip(base, 1), 3: cv2.flip(base, -1), 4: cv2.flip(base, 0),
                  5: t, 6: cv2.flip(t, 1), 7: cv2.flip(t, -1), 8: cv2.flip(t, 0)}
    for o, c in candidates.items():
        if c.shape == img.shape and np.array_equal(c, img):
            return o
    return 0


# ---- libjpeg-turbo for CMYK (OpenCV cannot write CMYK JPEGs) ----------------------------------

def tj_compress_cmyk(cmyk, quality=90, subsamp=2):
    lib = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
    lib.tjInitCompress.restype = ctypes.c_void_p
    h = lib.tjInitCompress()
    buf = ctypes.POINTER(ctypes.c_ubyte)()
    size = ctypes.c_ulong(0)
    hgt, wid = cmyk.shape[:2]
    src = np.ascontiguousarray(cmyk)
    tjpf_cmyk = 11
    rc = lib.tjCompress2(ctypes.c_void_p(h), src.ctypes.data_as(ctypes.c_void_p), wid, wid * 4,
                         hgt, tjpf_cmyk, ctypes.byref(buf), ctypes.byref(size), subsamp, quality,
                         4096)
    assert rc == 0
    data = ctypes.string_at(buf, size.value)
    lib.tjFree(buf)
    lib.tjDestroy(ctypes.c_void_p(h))
    return data


def set_adobe_transform(jpeg, transform):
    i = jpeg.index(b"Adobe") - 4
    assert jpeg[i:i + 2] == b"\xff\xee"
    # APP14 "Adobe": FF EE len(2) "Adobe"(5) version(2) flags0(2) flags1(2) transform(1)
    pos = i + 4 + 5 + 6
    return jpeg[:pos] + bytes([transform]) + jpeg[pos + 1:]


def drop_adobe(jpeg):
    i = jpeg.index(b"\xff\xee")
    n = struct.unpack(">H", jpeg[i + 2:i + 4])[0]
    return jpeg[:i] + jpeg[i + 2 + n:]


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.startswith(PREFIX):
            os.remove(os.path.join(OUT, f))

    # Resizes: non-integer shrink, portrait/landscape, odd sizes, up- and downscaling, integer
    # factors (2x takes OpenCV's area-fast path even for INTER_LINEAR, 3x its block average).
    shapes = [("l97x61", 97, 61, 48), ("p61x97", 61, 97, 48), ("up24x18", 24, 18, 40),
              ("x2_64x48", 64, 48, 32), ("x3_96x60", 96, 60, 32), ("up2_13x21", 13, 21, 42),
              ("l101x37", 101, 37, 48)]
    for i, (name, w, h, s) in enumerate(shapes):
        j = write(name + ".jpg", encode(pattern(w, h, i + 1)))
        for interp in ("linear", "area"):
            add_case("%s_%s_%d" % (name, interp, s), j, "load", s, interp)
            if name in ("l97x61", "p61x97"):  # sizes where int() and ceil() differ
                add_case("%s_%s_%d_ceil" % (name, interp, s), j, "loadceil", s, interp)
    # Explicit sizes with one axis enlarged and the other shrunk (INTER_AREA's linear emulation)
    j = PREFIX + "l97x61.jpg"
    for interp in ("linear", "area"):
        add_case("mixed_%s" % interp, j, "resize", (70, 22), interp)
        add_case("odd_%s" % interp, j, "resize", (23, 41), interp)

    # Unequal integer factors (4x2, 4x4): OpenCV's block average rounds sum/area half to even.
    j = PREFIX + "x2_64x48.jpg"
    add_case("block4x2_area", j, "resize", (16, 24), "area")
    add_case("block4x4_area", j, "resize", (16, 12), "area")

    # Greyscale JPEGs come back as 3 equal channels.
    g = write("grey45x29.jpg", encode(pattern(45, 29, 9, grey=True)))
    for interp in ("linear", "area"):
        add_case("grey_up_%s" % interp, g, "load", 52, interp)
        add_case("grey_down_%s" % interp, g, "load", 20, interp)

    # Encoder variants: progressive, restart markers, 4:4:4 where this OpenCV can write it.
    base = pattern(32, 24, 5)
    add_case("progressive", write("prog32x24.jpg", encode(base, 85, (cv2.IMWRITE_JPEG_PROGRESSIVE, 1))),
             "decode", 0, "-")
    add_case("restart", write("rst32x24.jpg", encode(base, 85, (cv2.IMWRITE_JPEG_RST_INTERVAL, 2))),
             "decode", 0, "-")
    if hasattr(cv2, "IMWRITE_JPEG_SAMPLING_FACTOR"):
        add_case("s444", write("s444_32x24.jpg", encode(base, 85, (cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                                                  0x111111))), "decode", 0, "-")

    # CMYK: YCCK (Adobe transform 2, what libjpeg-turbo writes), plain CMYK (transform 0) and
    # CMYK without an Adobe marker; OpenCV converts all with its inverted-CMYK formula.
    cm = np.dstack([pattern(32, 24, 11), pattern(32, 24, 12)[:, :, 0]])
    ycck = tj_compress_cmyk(cm)
    add_case("ycck", write("ycck32x24.jpg", ycck), "decode", 0, "-")
    add_case("cmyk", write("cmyk32x24.jpg", set_adobe_transform(ycck, 0)), "decode", 0, "-")
    add_case("cmyk_noadobe", write("cmyk_noadobe32x24.jpg", drop_adobe(set_adobe_transform(ycck, 0))),
             "decode", 0, "-")

    # Truncated in the scan (OpenCV decodes with a warning) and data after EOI.
    full = encode(base, 90)
    sos = full.index(b"\xff\xda")
    cut = sos + (len(full) - sos) // 2  # in the middle of the scan data
    add_case("truncated", write("trunc32x24.jpg", full[:cut]), "decode", 0, "-",
             warnings=WARN_NO_EOI)
    add_case("trailing", write("trail32x24.jpg", full + b"\0\0garbage"), "decode", 0, "-",
             warnings=WARN_NO_EOI)
    # Damaged entropy data: a stray marker and zeroed bytes inside the scan.
    mid = sos + (len(full) - sos) // 2
    bad = full[:mid] + b"\xff\xd5" + b"\0" * 6 + full[mid + 8:]
    add_case("badscan", write("badscan32x24.jpg", bad), "decode", 0, "-")

    # EXIF orientation: all 8 values, both byte orders, and the cases where OpenCV's reader
    # gives up or reads oddly.
    small = encode(pattern(13, 7, 21), 95)
    plain = write("exif_none.jpg", small)
    ref = cv_read(plain)
    add_case("exif_none", plain, "decode", 0, "-", orientation=1)
    exif_cases = []
    for o in range(1, 9):
        exif_cases.append(("exif_o%d" % o, [app1(b"Exif\0\0" + tiff_block(
            [(0x0112, 3, 1, short_value(o))]))], 0))
    exif_cases += [
        ("exif_mm_o6", [app1(b"Exif\0\0" + tiff_block([(0x0112, 3, 1, short_value(6, True))],
                                                      big_endian=True))], 0),
        ("exif_xmp_first", [app1(b"http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>"),
                            app1(b"Exif\0\0" + tiff_block([(0x0112, 3, 1, short_value(6))]))], 0),
        ("exif_after_jfif", [b"\xff\xe0\x00\x10JFIF\0\x01\x01\0\0\x01\0\x01\0\0",
                             app1(b"Exif\0\0" + tiff_block([(0x0112, 3, 1, short_value(8))]))], 0),
        ("exif_bad_make_first", [app1(b"Exif\0\0" + tiff_block(
            [(0x010F, 2, 20, long_value(0xFFFF)), (0x0112, 3, 1, short_value(6))]))], WARN_EXIF),
        ("exif_bad_make_after", [app1(b"Exif\0\0" + tiff_block(
            [(0x0112, 3, 1, short_value(6)), (0x010F, 2, 20, long_value(0xFFFF))]))], WARN_EXIF),
        ("exif_bad_rational", [app1(b"Exif\0\0" + tiff_block(
            [(0x011A, 5, 1, long_value(0xFFFFFFFC)), (0x0112, 3, 1, short_value(3))]))],
         WARN_EXIF),
        ("exif_value9", [app1(b"Exif\0\0" + tiff_block([(0x0112, 3, 1, short_value(9))]))], 0),
        ("exif_ifd_oob", [app1(b"Exif\0\0" + tiff_block([(0x0112, 3, 1, short_value(6))],
                                                        ifd_offset=8)[:8].replace(
            b"\x08\0\0\0", b"\0\0\1\0") + b"\0" * 16)], WARN_EXIF),
        ("exif_short_tiff", [app1(b"Exif\0\0II*\0")], WARN_EXIF),
        ("exif_two_orient", [app1(b"Exif\0\0" + tiff_block(
            [(0x0112, 3, 1, short_value(3)), (0x0112, 3, 1, short_value(6))]))], 0),
        ("exif_long_le", [app1(b"Exif\0\0" + tiff_block([(0x0112, 4, 1, long_value(6))]))], 0),
        ("exif_long_be", [app1(b"Exif\0\0" + tiff_block([(0x0112, 4, 1, long_value(6, True))],
                                                        big_endian=True))], 0),
        ("exif_many_tags", [app1(b"Exif\0\0" + tiff_block(
            [(0x010F, 2, 4, b"abc\0"), (0x0110, 2, 6, long_value(8 + 2 + 5 * 12 + 4)),
             (0x011A, 5, 1, long_value(8 + 2 + 5 * 12 + 4 + 8)), (0x0128, 3, 1, short_value(2)),
             (0x0112, 3, 1, short_value(7))],
            tail=b"model\0\0\0" + struct.pack("<II", 72, 1)))], 0),
    ]
    for name, segs, warn in exif_cases:
        j = write(name + ".jpg", with_segments(small, *segs))
        add_case(name, j, "decode", 0, "-", orientation=orientation_of(cv_read(j), ref),
                 warnings=warn)

    with open(os.path.join(OUT, PREFIX + "refs.txt"), "w") as f:
        f.write("# generated by tests/pack/make_image_refs.py with OpenCV %s\n" % cv2.__version__)
        f.write("# name jpeg op arg interp out_w out_h expected orientation warnings\n")
        f.write("\n".join(cases) + "\n")

    # ultralytics' size rule on awkward shapes (Python float semantics are the reference).
    shapes = [(640, 480, 640), (480, 640, 640), (641, 480, 640), (1, 3, 640), (3, 1, 640),
              (639, 1, 640), (333, 500, 640), (500, 333, 640), (1280, 960, 640),
              (1920, 1080, 640), (427, 640, 640), (612, 612, 640), (97, 61, 64), (5, 7, 1),
              (32768, 3, 640), (1000, 999, 640), (7, 3, 320), (640, 427, 320), (1023, 767, 640),
              (2047, 1, 640), (300, 299, 1024)]
    with open(os.path.join(OUT, PREFIX + "sizes.txt"), "w") as f:
        f.write("# w0 h0 S w h val_interp w_ceil h_ceil (ultralytics load_image, Python float "
                "semantics)\n")
        for w0, h0, s in shapes:
            w, h, r = target(w0, h0, s)
            wc, hc, _ = target(w0, h0, s, "ceil")
            f.write("%d %d %d %d %d %s %d %d\n" % (w0, h0, s, w, h, "linear" if r > 1 else "area",
                                                    wc, hc))

    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT)
                if f.startswith(PREFIX))
    print("wrote %d cases, %d files, %d bytes to %s" % (
        len(cases), len([f for f in os.listdir(OUT) if f.startswith(PREFIX)]), total, OUT))


if __name__ == "__main__":
    main()
