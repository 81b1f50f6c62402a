#!/usr/bin/python3
"""Writes the sample files for test_ffr_mini.sh, byte by byte from docs/format.md.

Like tools/ffr_mini.c this is written from the spec alone (never from ffr/): it is a third,
independent hand on the format. For each valid sample NAME.ffr it writes NAME.expected, the
output ffr-mini (and tests/tools/ffr_lines.c, through the library) must print, computed here from
the bytes it put in. For each invalid sample it writes NAME.err, the error code the spec gives
for it. Each invalid sample breaks one rule with every checksum still right, so only that rule
can catch it. The outputs are checked in (tests/tools/data), so the test needs neither this script
nor python3-xxhash; rerun it only to change the samples:

    apt-get install python3-xxhash zstd   # Debian packages
    /usr/bin/python3 tests/tools/make_mini_samples.py
"""
import os
import random
import struct
import subprocess

import xxhash

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MAGIC = b"\x89FFR\r\n\x1a\n"


def xxh3(b):
    return xxhash.xxh3_64_intdigest(bytes(b))


def up(x, align):
    return (x + align - 1) // align * align


def zstd(raw):
    """One zstd frame with its content size (section 4), from the zstd command-line tool."""
    return subprocess.run(["zstd", "-q", "-c", "-19", "--stream-size=%d" % len(raw), "-"],
                          input=raw, stdout=subprocess.PIPE, check=True).stdout


def zstd_raw_block(raw, size_field=True, dict_id=0):
    """A zstd frame built by hand (RFC 8878): one raw block, for frames the CLI will not write."""
    assert len(raw) < 256
    if size_field:  # Single_Segment, 1-byte Frame_Content_Size
        head = bytes([0x20 | (1 if dict_id else 0)]) + (bytes([dict_id]) if dict_id else b"")
        head += bytes([len(raw)])
    else:  # no Frame_Content_Size: a Window_Descriptor (1 KiB window) instead
        head = b"\x00\x00"
    return struct.pack("<I", 0xFD2FB528) + head + struct.pack("<I", len(raw) << 3 | 1)[:3] + raw


def ffr_bytes(records, meta, align=4096, version=1, flags=0, gap=0, sector=True):
    """records: list of (raw, summary, how), how being "raw", "zstd" (when smaller, as a writer
    does), "zstd!" (always) or (codec, stored) for stored bytes made by hand. gap adds align bytes
    after record 0, and sector=False puts the trailer right after the index: both break section 2.
    Returns (file bytes, expected output lines)."""
    hsize = up(64, align)
    head = MAGIC + struct.pack("<IIII", version, flags, align, hsize) + bytes(32)
    out = bytearray(head + struct.pack("<Q", xxh3(head)) + bytes(hsize - 64))
    rows, heap, lines = bytearray(), bytearray(), []
    for i, (raw, summary, how) in enumerate(records):
        stored, codec = raw, 0
        if isinstance(how, tuple):
            codec, stored = how
        elif how == "zstd!" or (how == "zstd" and len(zstd(raw)) < len(raw)):
            stored, codec = zstd(raw), 1
        frame = b"REC1" + bytes([codec, 0, 0, 0])
        frame += struct.pack("<IIQI", len(stored), len(raw), xxh3(stored), i & 0xFFFFFFFF)
        frame += struct.pack("<I", xxh3(frame) & 0xFFFFFFFF)
        rows += struct.pack("<QIIQIB3x", len(out), len(stored), len(raw), xxh3(stored),
                            len(heap), codec)
        out += frame + stored
        out += bytes(up(len(out), align) - len(out) + (gap if i == 0 else 0))
        heap += summary
        lines.append("%d %d %016x %d %016x" % (i, len(raw), xxh3(raw), len(summary),
                                                xxh3(summary)))
    index = b"FFRINDEX" + struct.pack("<QQQI", len(records), len(heap), len(meta), 32)
    index += bytes(28) + rows + heap + meta
    index_offset = len(out)
    out += index
    if sector:  # section 6: the trailer starts at a multiple of 512
        out += bytes(up(len(out), 512) - len(out))
    loc = b"FFRTAIL1" + struct.pack("<IIQQQQQ", version, flags, index_offset, len(index),
                                    len(records), xxh3(index), len(out) + 1536)
    loc += struct.pack("<Q", xxh3(loc))
    out += (loc + bytes(448)) * 3
    lines += ["records %d" % len(records), "metadata %d %016x" % (len(meta), xxh3(meta))]
    return bytes(out), lines


def rehash(data):
    """Recomputes every hash of a file whose bytes were patched: the header's, each frame's, the
    index's and the three locators'. Lets a sample break exactly one non-hash rule."""
    d = bytearray(data)
    d[56:64] = struct.pack("<Q", xxh3(d[:56]))
    toff = len(d) - 1536
    ioff, isize, n = struct.unpack_from("<QQQ", d, toff + 16)
    for i in range(n):
        off = struct.unpack_from("<Q", d, ioff + 64 + 32 * i)[0]
        d[off + 28:off + 32] = struct.pack("<I", xxh3(d[off:off + 28]) & 0xFFFFFFFF)
    loc = bytearray(d[toff:toff + 64])
    loc[40:48] = struct.pack("<Q", xxh3(d[ioff:ioff + isize]))
    loc[56:64] = struct.pack("<Q", xxh3(loc[:56]))
    for s in range(3):
        d[toff + 512 * s:toff + 512 * s + 64] = loc
    return bytes(d)


DET_HEADER = 72  # section 8: H of version 2, what writers write


def det_sample(rng, h, w, fmt, labels, segments, name, image_id=-1, pixels=None):
    """Section 8: one version 2 detection sample and its section 8.1 summary."""
    if pixels is not None:
        pass
    elif fmt == 2:  # a JPEG file's bytes; its length is odd on purpose, to need padding
        pixels = b"\xff\xd8" + bytes(rng.randrange(256) for _ in range(37)) + b"\xff\xd9"
    else:  # a smooth gradient, so zstd gains (and RGB8-SUB more)
        img = bytes((x * 7 + y * 3 + c * 50) % 256 for y in range(h) for x in range(w)
                    for c in range(3))
        pixels = img
        if fmt == 1:  # PNG "Sub": each byte minus the same channel of the pixel to its left
            pixels = bytes(img[k] if (k // 3) % w == 0 else (img[k] - img[k - 3]) % 256
                           for k in range(len(img)))
    n_points = sum(len(s) for s in segments) if segments else 0
    head = b"YDET" + struct.pack("<HBB", 2, fmt, 3)
    head += struct.pack("<8Iq", h, w, h + 5, w + 9, len(pixels), len(labels), n_points, len(name),
                        image_id) + bytes(DET_HEADER - 48)
    rows = b"".join(struct.pack("<5f", *row) for row in labels)
    body = head + pixels + bytes(up(len(pixels), 4) - len(pixels)) + rows
    if n_points:
        body += b"".join(struct.pack("<I", len(s)) for s in segments)
        body += b"".join(struct.pack("<2f", *p) for s in segments for p in s)
    body += name.encode()
    summary = struct.pack("<5I", h, w, h + 5, w + 9, len(labels)) + rows
    return body, summary


def as_v1(body):
    """The same sample in version 1's layout: a 64-byte header, the rest unchanged."""
    return patch(body[:64], 4, struct.pack("<H", 1)) + body[DET_HEADER:]


def patch(b, off, new):
    return b[:off] + new + b[off + len(new):]


def save(name, data, lines=None, err=None):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    stem = os.path.join(OUT, name[:-4])
    if lines is not None:
        with open(stem + ".expected", "w") as f:
            f.write("\n".join(lines) + "\n")
    if err is not None:
        with open(stem + ".err", "w") as f:
            f.write(err + "\n")


def main():
    rng = random.Random(2)
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        if old.endswith((".ffr", ".expected", ".err")):
            os.remove(os.path.join(OUT, old))

    # Opaque records: empty, random (stays raw), repetitive (zstd), odd sizes; default align.
    def blob(n, repetitive):
        return bytes((k % 13 if repetitive else rng.randrange(256)) for k in range(n))

    recs = [(b"", b"", "zstd"), (blob(100, False), b"s0", "zstd"), (blob(5000, True), b"", "zstd"),
            (blob(4064, False), b"summary-3", "raw"), (blob(1, False), b"x", "zstd")]
    data, lines = ffr_bytes(recs, b"name: opaque\nnote: records of random sizes\n")
    save("opaque-a4096.ffr", data, lines)
    small = [(blob(rng.randrange(0, 300), k % 2 == 0), blob(rng.randrange(0, 9), False), "zstd")
             for k in range(12)]
    data, lines = ffr_bytes(small, b"", align=1)
    save("small-a1.ffr", data, lines)
    data, lines = ffr_bytes(small[:5], "café: ok\n".encode(), align=64)
    save("small-a64.ffr", data, lines)
    save("empty.ffr", *ffr_bytes([], b"records: 0\n", align=512))
    # Readers accept zstd records that do not shrink (section 4), and frames any encoder may
    # write: here an empty record and one-byte records, from the CLI and built by hand.
    save("zstd-any.ffr", *ffr_bytes([(b"", b"", "zstd!"), (b"q", b"", "zstd!"),
                                     (b"hand", b"h", (1, zstd_raw_block(b"hand")))], b"", align=8))
    # The index ends exactly on a 512-byte boundary: no padding before the trailer.
    plain = ffr_bytes(small[:3], b"", align=16)[0]
    ioff, isize = struct.unpack_from("<QQ", plain, len(plain) - 1536 + 16)
    data, lines = ffr_bytes(small[:3], b"#" * (-(ioff + isize) % 512 or 512), align=16)
    ioff, isize = struct.unpack_from("<QQ", data, len(data) - 1536 + 16)
    assert ioff + isize == len(data) - 1536
    save("sector-exact.ffr", data, lines)

    # Detection samples (section 8): all three pixel formats, with and without polygons.
    dets = [
        det_sample(rng, 6, 8, 0, [(0, .5, .5, .25, .5), (79, .1, .2, .05, .1)], [], "a.jpg", 9),
        det_sample(rng, 5, 7, 1, [(3, .4, .6, .3, .2)], [[(.3, .5), (.5, .5), (.4, .7)]], "b.jpg"),
        det_sample(rng, 4, 4, 2, [], [], "000000000009.jpg", 9),
        det_sample(rng, 3, 9, 0, [(1, .5, .5, 1, 1), (2, .2, .2, .1, .1)],
                   [[], [(.15, .15), (.25, .15), (.25, .25), (.15, .25)]], "d.png", 1234567),
    ]
    meta = b"encoding: ffr-det-1\nnames: [person, bicycle, car, motorcycle]\nsize: 640\n"
    data, lines = ffr_bytes([(b, s, "zstd") for b, s in dets], meta, align=256)
    save("det.ffr", data, lines)
    # Files written before version 2: the same samples with 64-byte headers, and both in one file.
    data, lines = ffr_bytes([(as_v1(b), s, "zstd") for b, s in dets], meta, align=256)
    save("det-v1.ffr", data, lines)
    data, lines = ffr_bytes([(as_v1(b) if k % 2 else b, s, "raw") for k, (b, s) in enumerate(dets)],
                            meta, align=8)
    save("det-mixed.ffr", data, lines)

    # A sharded dataset (section 7): two shards and their manifest; metadata from the last.
    shards, all_lines, base = [], [], 0
    for k, part in enumerate([small[:4], small[4:7]]):
        data, lines = ffr_bytes(part, b"shard: %d\n" % k, align=128)
        save("set-%05d.ffr" % k, data, lines)
        index_hash = struct.unpack_from("<Q", data, len(data) - 1536 + 40)[0]
        shards.append(("set-%05d.ffr" % k, len(data), len(part), index_hash))
        all_lines += ["%d %s" % (base + int(ln.split()[0]), ln.split(" ", 1)[1])
                      for ln in lines[:-2]]
        base += len(part)
    set_lines = all_lines + ["records %d" % base, lines[-1]]

    def manifest(rows, version=1, total=base, quote=False):
        text = "# ffr manifest\nffr_manifest: %d\nrecords: %d  # sum over shards\nshards:\n" % (
            version, total)
        for name, size, n, h in rows:
            text += ('  - file: "%s"\n' if quote else "  - file: %s # relative\n") % name
            text += "    bytes: %d\n    records: %d\n    index_hash: 0x%016x\n" % (size, n, h)
        return text.encode()

    save("set.ffr", manifest(shards), set_lines)
    save("set-quoted.ffr", manifest(shards, quote=True), set_lines)
    save("set-missing.ffr", manifest(shards + [("set-00007.ffr", 1, 1, 1)], total=base + 1),
         err="FFR_ESHARD")
    save("set-althash.ffr", manifest([shards[0], shards[1][:3] + (shards[1][3] ^ 1,)]),
         err="FFR_ESHARD")
    save("set-bytes.ffr", manifest([shards[0][:1] + (shards[0][1] + 512,) + shards[0][2:]],
                                   total=shards[0][2]), err="FFR_ESHARD")
    # section 7: each file once (the same shard twice would be read twice per epoch)
    save("set-twice.ffr", manifest([shards[0], shards[0]], total=2 * shards[0][2]),
         err="FFR_ESHARD")
    save("set-v2.ffr", manifest(shards, version=2), err="FFR_EVERSION")
    save("set-sum.ffr", manifest(shards, total=base + 1), err="FFR_ECORRUPT")
    save("set-none.ffr", manifest([], total=0), err="FFR_ECORRUPT")
    save("set-slash.ffr", manifest([("./" + shards[0][0],) + shards[0][1:]], total=shards[0][2]),
         err="FFR_ECORRUPT")
    # index_hash with 17 digits (a leading zero), and a decimal with a leading zero (decimal,
    # not YAML 1.1's octal: section 7 says integers are decimal).
    save("set-longhex.ffr", manifest(shards).replace(b"index_hash: 0x", b"index_hash: 0x0", 1),
         err="FFR_ECORRUPT")
    save("set-zero.ffr", manifest(shards).replace(b"bytes: ", b"bytes: 0", 1), set_lines)
    save("set-nohash.ffr", manifest(shards).replace(b"    index_hash: 0x%016x\n" % shards[1][3],
                                                    b""), err="FFR_ECORRUPT")
    # Section 7's subset and nothing more, the same for every reader (issue 20: the library's
    # YAML parser used to take flow style, aliases and repeated keys that ffr-mini refused).
    good = manifest(shards)
    e0 = "  - file: %s # relative\n" % shards[0][0]
    flow = ("# ffr manifest\nffr_manifest: 1\nrecords: %d\nshards: [{file: %s, bytes: %d, "
            "records: %d, index_hash: 0x%016x}]\n" % ((shards[0][2],) + shards[0]))
    save("set-flow.ffr", flow.encode(), err="FFR_ECORRUPT")
    save("set-anchor.ffr", good.replace(e0.encode(), e0.replace("file: ", "file: &f ").encode()),
         err="FFR_ESHARD")  # the name is "&f set-00000.ffr": no such shard
    alias = manifest(shards[:1], total=2 * shards[0][2]).replace(
        b"  - file:", b"  - &e\n    file:", 1) + b"  - *e\n"
    save("set-alias.ffr", alias, err="FFR_ECORRUPT")
    save("set-twicekey.ffr", good.replace(b"records: %d" % base, b"records: %d\nrecords: %d" %
                                          (base, base), 1), err="FFR_ECORRUPT")
    save("set-twicebytes.ffr", good.replace(b"    bytes:", b"    bytes: 1\n    bytes:", 1),
         err="FFR_ECORRUPT")
    save("set-tab.ffr", good.replace(b"bytes: ", b"bytes:\t", 1), err="FFR_ECORRUPT")
    save("set-unknown.ffr", good.replace(b"shards:\n", b"note: made by hand # ok\nshards:\n", 1)
         .replace(b"    bytes:", b"    made_by: yolo-pack\n    bytes:", 1), set_lines)
    save("set-quotednum.ffr", good.replace(b"bytes: %d" % shards[0][1],
                                           b'bytes: "%d"' % shards[0][1], 1), set_lines)
    save("set-crlf.ffr", good.replace(b"\n", b"\r\n"), set_lines)
    save("set-hashname.ffr", manifest([('set#1.ffr',) + shards[0][1:]], quote=True,
                                      total=shards[0][2]), err="FFR_ECORRUPT")
    save("set-nomagic.ffr", good.replace(b"ffr_manifest: 1\n", b""), err="FFR_EBADMAGIC")
    save("set-docmark.ffr", good.replace(b"ffr_manifest: 1\n", b"---\nffr_manifest: 1\n"),
         err="FFR_ECORRUPT")
    save("set-multiline.ffr", good.replace(b"    index_hash: 0x", b"    index_hash:\n      0x", 1),
         err="FFR_ECORRUPT")
    save("set-longline.ffr", good.replace(b"shards:\n", b"#" + b"x" * 5000 + b"\nshards:\n", 1),
         err="FFR_ECORRUPT")
    save("set-nul.ffr", good.replace(b"# relative", b"# rel\0ative", 1), err="FFR_ECORRUPT")

    # A shard that fails to open gives that shard's own error (section 7).
    bad = ffr_bytes(small[:2], b"", align=1, flags=4)[0]
    save("bad-flags.ffr", bad, err="FFR_EFLAGS")
    save("set-badshard.ffr", manifest([("bad-flags.ffr", len(bad), 2, 0)], total=2),
         err="FFR_EFLAGS")

    # Header (section 3), each refused in the spec's order of checks.
    two = small[:2]
    save("bad-version.ffr", ffr_bytes(two, b"", align=1, version=2)[0], err="FFR_EVERSION")
    save("bad-version0.ffr", ffr_bytes(two, b"", align=1, version=0)[0], err="FFR_EVERSION")
    save("bad-magic.ffr", b"just some text, not a record file\n" * 3, err="FFR_EBADMAGIC")
    save("cut-magic.ffr", MAGIC[:5], err="FFR_ETRUNC")
    ok = ffr_bytes(two, b"", align=1)[0]
    # flags unknown AND the hash wrong: the hash is checked first.
    save("bad-hash.ffr", patch(ok, 12, b"\x04"), err="FFR_ECHECKSUM")
    save("bad-hdrsize.ffr", rehash(patch(ok, 20, b"\x41")), err="FFR_ECORRUPT")
    hfai = struct.pack("<IQ", 0, 2) + struct.pack("<2I", 1, 2) + struct.pack("<2Q", 36, 40)
    save("foreign-hfai.ffr", hfai + b"abcdefgh", err="FFR_EFOREIGN")

    # Layout (section 2), index (5) and trailer (6).
    save("gap.ffr", ffr_bytes(two, b"", align=64, gap=64)[0], err="FFR_ECORRUPT")
    save("tail-nosector.ffr", ffr_bytes(two, b"", align=1, sector=False)[0], err="FFR_ECORRUPT")
    toff = len(ok) - 1536
    ioff, isize = struct.unpack_from("<QQ", ok, toff + 16)
    assert ioff + isize < toff
    save("tail-padding.ffr", patch(ok, toff - 1, b"\x01"), err="FFR_ECORRUPT")
    slot = bytearray(ok[toff:toff + 64])  # slot 2 a good locator of another index size
    slot[24:32] = struct.pack("<Q", isize + 1)
    slot[56:64] = struct.pack("<Q", xxh3(slot[:56]))
    save("tail-differ.ffr", patch(ok, toff + 1024, bytes(slot)), err="FFR_ECORRUPT")
    save("tail-slot1.ffr", patch(ok, toff + 512 + 60, b"\xff"), err="FFR_ECHECKSUM")
    save("tail-version.ffr", rehash(patch(ok, toff + 8, b"\x02")), err="FFR_ECORRUPT")
    save("index-rowsize.ffr", rehash(patch(ok, ioff + 32, b"\x30")), err="FFR_ECORRUPT")
    save("index-sum0.ffr", rehash(patch(ok, ioff + 64 + 24, b"\x01")), err="FFR_ECORRUPT")
    # N = 0 with a 1-byte heap (the metadata's byte counted as heap instead)
    data = bytearray(ffr_bytes([], b"h", align=1)[0])
    save("index-heap0.ffr", rehash(data.replace(b"FFRINDEX" + struct.pack("<QQQ", 0, 0, 1),
                                                b"FFRINDEX" + struct.pack("<QQQ", 0, 1, 0))),
         err="FFR_ECORRUPT")
    # record 0's frame number field says 1
    save("frame-number.ffr", rehash(patch(ok, 64 + 24, b"\x01")), err="FFR_ECORRUPT")

    # Codec 1 (section 4): one regular frame, content size present, no dictionary, no tail.
    def zstd_file(stored, raw):
        return ffr_bytes([(raw, b"", (1, stored))], b"", align=1)[0]

    skippable = struct.pack("<II", 0x184D2A50, 4) + b"\0\0\0\0"  # RFC 8878 skippable frame
    save("zstd-skippable.ffr", zstd_file(skippable, b""), err="FFR_ECORRUPT")
    save("zstd-dict.ffr", zstd_file(zstd_raw_block(b"abc", dict_id=7), b"abc"),
         err="FFR_ECORRUPT")
    save("zstd-nosize.ffr", zstd_file(zstd_raw_block(b"abc", size_field=False), b"abc"),
         err="FFR_ECORRUPT")
    save("zstd-tail.ffr", zstd_file(zstd_raw_block(b"abc") + struct.pack("<II", 0x184D2A5F, 0),
                                    b"abc"), err="FFR_ECORRUPT")
    save("zstd-size.ffr", zstd_file(zstd_raw_block(b"abc"), b"abcd"), err="FFR_ECORRUPT")

    # Detection samples (section 8) that break one rule each.
    def det_file(body, summary):
        return ffr_bytes([(body, summary, "raw")], meta, align=1)[0]

    body, summary = dets[0]
    lab = DET_HEADER + up(struct.unpack_from("<I", body, 24)[0], 4)
    save("det-badsummary.ffr", det_file(body, summary[:-1] + b"\x01"), err="FFR_ECORRUPT")
    save("det-badclass.ffr", det_file(patch(body, lab, struct.pack("<f", 1.5)), summary),
         err="FFR_ECORRUPT")
    inf = patch(body, lab + 4, struct.pack("<f", float("inf")))
    save("det-inf.ffr", det_file(inf, patch(summary, 24, inf[lab + 4:lab + 8])),
         err="FFR_ECORRUPT")
    save("det-magic.ffr", det_file(patch(body, 0, b"YDEX"), summary), err="FFR_EBADMAGIC")
    # the magic is right, the record too short for the sample header of either version
    save("det-short.ffr", det_file(body[:40], summary), err="FFR_ECORRUPT")
    save("det-short2.ffr", det_file(body[:68], summary), err="FFR_ECORRUPT")
    save("det-v3.ffr", det_file(patch(body, 4, b"\x03"), summary), err="FFR_EVERSION")
    save("det-v0.ffr", det_file(patch(body, 4, b"\x00"), summary), err="FFR_EVERSION")
    # each version's layout labelled as the other: the sizes no longer add up
    save("det-2as1.ffr", det_file(patch(body, 4, b"\x01"), summary), err="FFR_ECORRUPT")
    save("det-1as2.ffr", det_file(patch(as_v1(body), 4, b"\x02"), summary), err="FFR_ECORRUPT")
    save("det-reserved.ffr", det_file(patch(body, DET_HEADER - 1, b"\x01"), summary),
         err="FFR_ECORRUPT")
    save("det-h0.ffr", det_file(*det_sample(rng, 0, 8, 0, [], [], "h0.jpg")), err="FFR_ECORRUPT")
    save("det-jpeg0.ffr", det_file(*det_sample(rng, 4, 4, 2, [], [], "j.jpg", pixels=b"")),
         err="FFR_ECORRUPT")
    jb, js = dets[2]  # JPEG of 41 bytes: 3 bytes of padding
    save("det-padding.ffr", det_file(patch(jb, DET_HEADER + 41, b"\x01"), js), err="FFR_ECORRUPT")
    pb, ps = dets[3]  # 2 labels, n_points 4: counts 0 and 4 become 1 and 4
    pts_at = DET_HEADER + up(9 * 3 * 3, 4) + 40
    save("det-points.ffr", det_file(patch(pb, pts_at, b"\x01"), ps), err="FFR_ECORRUPT")
    save("det-nanpoint.ffr", det_file(patch(pb, pts_at + 8, struct.pack("<f", float("nan"))),
                                      ps), err="FFR_ECORRUPT")
    save("det-nulname.ffr", det_file(*det_sample(rng, 1, 1, 0, [], [], "a\0b.jpg")),
         err="FFR_ECORRUPT")


if __name__ == "__main__":
    main()
