#!/usr/bin/python3
"""Write tests/trainer/data_augment/copypaste.bin: OpenCV's polygon fill and ultralytics'
copy_paste, for tests/trainer/test_augment_copypaste.c.

1. poly/K: random polygons (3..14 vertices: convex, concave, self-intersecting, partly or wholly
   outside the image) filled with cv2.drawContours(FILLED) on a 48 x 32 mask, as copy_paste
   draws them.
2. cp/K: copy_paste (ultralytics v7.0 utils/augmentations.py, re-implemented below from its
   published text) on a gen_image canvas with polygon labels, with random.sample's choice fixed
   and stored, so the C code can be run on the same draw: the canvas, labels and polygons after.

Run with Debian's python3-opencv and numpy: /usr/bin/python3 tests/trainer/make_copypaste_refs.py
Same file format as make_augment_refs.py (AUGREF01).
"""
import os
import random
import sys

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_augment_refs import Writer, gen_image  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_augment", "copypaste.bin")


def bbox_ioa(box1, box2, eps=1e-7):
    b1_x1, b1_y1, b1_x2, b1_y2 = box1
    b2_x1, b2_y1, b2_x2, b2_y2 = box2.T
    inter_area = (np.minimum(b1_x2, b2_x2) - np.maximum(b1_x1, b2_x1)).clip(0) * \
                 (np.minimum(b1_y2, b2_y2) - np.maximum(b1_y1, b2_y1)).clip(0)
    box2_area = (b2_x2 - b2_x1) * (b2_y2 - b2_y1) + eps
    return inter_area / box2_area


def copy_paste(im, labels, segments, order):
    """v7.0's copy_paste with random.sample's result given (order)."""
    n = len(segments)
    if n:
        h, w, c = im.shape
        im_new = np.zeros(im.shape, np.uint8)
        for j in order:
            l, s = labels[j], segments[j]
            box = w - l[3], l[2], w - l[1], l[4]
            ioa = bbox_ioa(box, labels[:, 1:5])
            if (ioa < 0.30).all():
                labels = np.concatenate((labels, [[l[0], *box]]), 0)
                segments.append(np.concatenate((w - s[:, 0:1], s[:, 1:2]), 1))
                cv2.drawContours(im_new, [segments[j].astype(np.int32)], -1, (1, 1, 1), cv2.FILLED)
        result = cv2.flip(im, 1)
        i = cv2.flip(im_new, 1).astype(bool)
        im[i] = result[i]
    return im, labels, segments


def main():
    rnd = random.Random(20261127)
    W = Writer()
    mw, mh = 48, 32
    polys = 0
    for k in range(48):
        n = rnd.randint(3, 14)
        lo, hi = (-15, 63) if k % 4 == 3 else (0, 47)
        pts = np.array([[rnd.randint(lo, hi), rnd.randint(lo * mh // mw, hi * mh // mw)]
                        for _ in range(n)], np.int32)
        if k % 5 == 0:  # star-shaped about a centre: concave, not self-intersecting
            cx, cy = rnd.uniform(8, 40), rnd.uniform(6, 26)
            ang = np.sort(np.array([rnd.uniform(0, 2 * np.pi) for _ in range(n)]))
            rad = np.array([rnd.uniform(2, 18) for _ in range(n)])
            pts = np.stack([cx + rad * np.cos(ang), cy + rad * np.sin(ang)], 1).astype(np.int32)
        mask = np.zeros((mh, mw, 3), np.uint8)
        cv2.drawContours(mask, [pts], -1, (1, 1, 1), cv2.FILLED)
        W.put("poly/%d/pts" % k, pts, np.int32)
        W.put("poly/%d/mask" % k, np.ascontiguousarray(mask[:, :, 0]))
        polys += 1
    W.put("poly/count", polys, np.int32)

    cases = 0
    for k in range(12):
        cw = ch = 48 if k % 2 == 0 else 40
        img = gen_image(cw, ch, 900 + k)
        n = rnd.randint(1, 7)
        labels, segs = [], []
        for _ in range(n):
            cx, cy = rnd.uniform(5, cw - 5), rnd.uniform(5, ch - 5)
            m = rnd.randint(3, 10)
            ang = np.sort(np.array([rnd.uniform(0, 2 * np.pi) for _ in range(m)]))
            rad = np.array([rnd.uniform(2, 12) for _ in range(m)])
            seg = np.stack([cx + rad * np.cos(ang), cy + rad * np.sin(ang)], 1).astype(np.float32)
            np.clip(seg[:, 0], 0, cw, out=seg[:, 0])
            np.clip(seg[:, 1], 0, ch, out=seg[:, 1])
            labels.append([rnd.randint(0, 79), seg[:, 0].min(), seg[:, 1].min(), seg[:, 0].max(),
                           seg[:, 1].max()])
            segs.append(seg)
        labels = np.array(labels, np.float32)
        order = rnd.sample(range(n), k=rnd.randint(1, n))
        W.put("cp/%d/img" % k, [900 + k, cw, ch], np.int32)
        W.put("cp/%d/labels" % k, labels, np.float32)
        W.put("cp/%d/seg_n" % k, [len(s) for s in segs], np.int32)
        W.put("cp/%d/seg_xy" % k, np.concatenate(segs, 0), np.float32)
        W.put("cp/%d/order" % k, order, np.int32)
        out, lab, sg = copy_paste(img.copy(), labels, list(segs), order)
        W.put("cp/%d/out" % k, np.ascontiguousarray(out))
        W.put("cp/%d/out_labels" % k, lab, np.float32)
        W.put("cp/%d/out_seg_n" % k, [len(s) for s in sg], np.int32)
        W.put("cp/%d/out_seg_xy" % k, np.concatenate(sg, 0), np.float32)
        cases += 1
    W.put("cp/count", cases, np.int32)
    W.write(OUT)
    print("wrote %s (%d entries, %d bytes), OpenCV %s, numpy %s" % (
        OUT, len(W.entries), os.path.getsize(OUT), cv2.__version__, np.__version__))


if __name__ == "__main__":
    sys.exit(main())
