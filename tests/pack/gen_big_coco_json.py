#!/usr/bin/env python3
"""Write a synthetic COCO instances file shaped like instances_train2017.json, for benchmarking
the streaming COCO parser (pack/coco_json.c) on a file of the real size.

Defaults give ~118k images and ~860k annotations, ~450 MB, in the real file's key order (info,
licenses, images, annotations, categories: categories come LAST, so a parser cannot map classes
while streaming). Polygons have 2-decimal pixel coordinates like COCO's; ~10% have several parts;
~1% of annotations are crowd with an uncompressed RLE `counts` list. The output is written to the
path given (put it in a temporary directory; never commit it).

    python3 tests/pack/gen_big_coco_json.py /tmp/big/instances_train2017.json
    /usr/bin/time -v build/tests/pack/test_coco_bench /tmp/big/instances_train2017.json
"""
import argparse
import random
import sys

COCO80_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
              25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49,
              50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74,
              75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


def polygon(rng, x, y, w, h):
    n = rng.randint(5, 30)
    pts = []
    for _ in range(n):
        pts.append("%.2f" % (x + rng.random() * w))
        pts.append("%.2f" % (y + rng.random() * h))
    return "[" + ", ".join(pts) + "]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=118287)
    ap.add_argument("--annotations", type=int, default=860001)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w", buffering=1 << 22) as f:
        f.write('{"info": {"description": "synthetic COCO-shaped file", "version": "1.0", '
                '"year": 2017, "contributor": "ffyolo gen_big_coco_json.py"}, '
                '"licenses": [{"url": "http://example.invalid/", "id": 1, "name": "none"}], ')
        f.write('"images": [')
        sizes = []
        for i in range(a.images):
            iid = 1 + i * 3
            w, h = rng.choice([(640, 480), (640, 427), (480, 640), (640, 426), (500, 375)])
            sizes.append((iid, w, h))
            f.write(('' if i == 0 else ', ') +
                    '{"license": 1, "file_name": "%012d.jpg", "coco_url": '
                    '"http://images.example.invalid/train2017/%012d.jpg", "height": %d, '
                    '"width": %d, "date_captured": "2013-11-14 11:18:45", "flickr_url": '
                    '"http://farm.example.invalid/%d.jpg", "id": %d}' % (iid, iid, h, w, iid, iid))
        f.write('], "annotations": [')
        for j in range(a.annotations):
            iid, w, h = sizes[rng.randrange(len(sizes))]
            bw = rng.uniform(2, w / 2)
            bh = rng.uniform(2, h / 2)
            bx = rng.uniform(0, w - bw)
            by = rng.uniform(0, h - bh)
            crowd = rng.random() < 0.01
            if crowd:
                counts = ", ".join(str(rng.randint(1, 400)) for _ in range(rng.randint(50, 300)))
                seg = '{"counts": [%s], "size": [%d, %d]}' % (counts, h, w)
            else:
                parts = 1 if rng.random() >= 0.1 else rng.randint(2, 4)
                seg = "[" + ", ".join(polygon(rng, bx, by, bw, bh) for _ in range(parts)) + "]"
            f.write(('' if j == 0 else ', ') +
                    '{"segmentation": %s, "area": %.4f, "iscrowd": %d, "image_id": %d, '
                    '"bbox": [%.2f, %.2f, %.2f, %.2f], "category_id": %d, "id": %d}' %
                    (seg, bw * bh * 0.7, 1 if crowd else 0, iid, bx, by, bw, bh,
                     rng.choice(COCO80_IDS), 1000000 + j))
        f.write('], "categories": [')
        f.write(", ".join('{"supercategory": "thing", "id": %d, "name": "class%d"}' % (c, c)
                          for c in COCO80_IDS))
        f.write("]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
