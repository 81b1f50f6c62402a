#!/usr/bin/python3
"""Compare pack/image with OpenCV on every pixel of coco128.

usage: check_opencv_coco128.py IMAGE_DUMP COCO128_DIR

For each long side S and interpolation, runs IMAGE_DUMP (tests/pack/image_dump.c: pack/image
decode + ultralytics load_image resize) on all images of COCO128_DIR/images/**, and computes the
same with cv2.imread + cv2.resize(im, (int(w0*r), int(h0*r))) (BGR -> RGB; ultralytics v7.0). Prints the maximum
absolute difference and how many pixels (and channel values) differ; fails if any value differs
by more than 1, a size differs, or either side cannot read an image.

Exit 77 (meson: skipped) when this python has no cv2 (Debian: apt-get install python3-opencv)
or the dataset is missing.
"""
import glob
import os
import subprocess
import sys

# S = 640 is what yolo-pack uses (most coco128 images already have long side 640, so that run is
# mostly the no-resize path); 512 and 320 shrink every image (320 takes OpenCV's exact-2x path
# for 640x480 images), 800 enlarges every image (INTER_AREA's bilinear emulation).
RUNS = [(640, "linear"), (640, "area"), (512, "linear"), (512, "area"), (320, "linear"),
        (800, "area")]


def skip(why):
    print("1..0 # SKIP %s" % why)
    sys.exit(77)


def main():
    if len(sys.argv) != 3:
        print("usage: check_opencv_coco128.py IMAGE_DUMP COCO128_DIR", file=sys.stderr)
        return 2
    dump, root = sys.argv[1], sys.argv[2]
    try:
        import cv2
        import numpy as np
    except ImportError:
        skip("no cv2 in %s (apt-get install python3-opencv)" % sys.executable)
    files = sorted(glob.glob(os.path.join(root, "images", "**", "*.jpg"), recursive=True))
    if not files:
        skip("no images under %s/images (../shared missing?)" % root)
    interps = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA}

    ref_full = {}
    for f in files:
        im = cv2.imread(f, cv2.IMREAD_COLOR)
        if im is None:
            print("not ok - cv2 cannot read %s" % f)
            return 1
        ref_full[f] = im

    failed = 0
    total_values = total_pixels = 0
    overall_max = 0
    for n, (size, interp) in enumerate(RUNS, 1):
        out = subprocess.run([dump, "-s", str(size), "-i", interp] + files, check=True,
                             stdout=subprocess.PIPE).stdout
        pos = 0
        max_diff = diff_values = diff_pixels = values = resized = 0
        problems = []
        for f in files:
            end = out.index(b"\n", pos)
            head = out[pos:end].decode().split()
            pos = end + 1
            if head[0] != "OK":
                problems.append("%s: %s" % (f, " ".join(head)))
                continue
            w, h = int(head[1]), int(head[2])
            ours = np.frombuffer(out[pos:pos + w * h * 3], np.uint8).reshape(h, w, 3)
            pos += w * h * 3
            im = ref_full[f]
            h0, w0 = im.shape[:2]
            r = size / max(h0, w0)
            if r != 1:
                im = cv2.resize(im, (max(1, int(w0 * r)), max(1, int(h0 * r))),
                                interpolation=interps[interp])
                resized += 1
            ref = im[:, :, ::-1]
            if ref.shape != ours.shape:
                problems.append("%s: size %dx%d, OpenCV %dx%d" % (f, w, h, ref.shape[1],
                                                                  ref.shape[0]))
                continue
            values += ours.size
            if np.array_equal(ref, ours):
                continue
            d = np.abs(ref.astype(np.int16) - ours.astype(np.int16))
            max_diff = max(max_diff, int(d.max()))
            diff_values += int(np.count_nonzero(d))
            diff_pixels += int(np.count_nonzero(d.max(axis=2)))
        ok = not problems and max_diff <= 1
        failed += not ok
        overall_max = max(overall_max, max_diff)
        total_values += values
        total_pixels += diff_pixels
        print("%sok %d - S=%d %s: %d images (%d resized), max |diff| %d, %d pixels / %d of %d "
              "values differ" % ("" if ok else "not ", n, size, interp, len(files), resized,
                                 max_diff, diff_pixels, diff_values, values))
        for p in problems[:10]:
            print("#   %s" % p)
    print("1..%d" % len(RUNS))
    print("# overall: max |diff| %d, %d differing pixels in %d values checked" % (
        overall_max, total_pixels, total_values))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
