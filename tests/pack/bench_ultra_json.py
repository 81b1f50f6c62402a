#!/usr/bin/env python3
"""The Python side of scripts/bench-scale's COCO JSON row: json.load of an instances file, then
ultralytics' label conversion loop (JSON2YOLO's convert_coco, as ultralytics/yolov5 users run it:
annotations grouped by image, crowd skipped, boxes to normalised centre x, y, w, h, classes
91 -> 80, duplicates dropped), in pure Python (numpy is not needed for these few operations and
would only add its import time). Prints one line: load seconds, loop seconds, images, boxes and
peak RSS in KB.

    bench_ultra_json.py instances_train2017.json
"""
import json
import resource
import sys
import time
from collections import defaultdict

COCO91_TO_80 = [None] * 91
_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27,
        28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53,
        54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80,
        81, 82, 84, 85, 86, 87, 88, 89, 90]
for k, i in enumerate(_IDS):
    COCO91_TO_80[i - 1] = k


def main():
    t0 = time.perf_counter()
    with open(sys.argv[1]) as f:
        data = json.load(f)
    t1 = time.perf_counter()
    images = {"%g" % x["id"]: x for x in data["images"]}
    img_to_anns = defaultdict(list)
    for ann in data["annotations"]:
        img_to_anns[ann["image_id"]].append(ann)
    n_boxes = 0
    for img_id, anns in img_to_anns.items():
        img = images["%g" % img_id]
        h, w = img["height"], img["width"]
        bboxes = []
        for ann in anns:
            if ann.get("iscrowd"):
                continue
            x, y, bw, bh = ann["bbox"]
            box = [x + bw / 2, y + bh / 2, bw, bh]
            box[0] /= w
            box[2] /= w
            box[1] /= h
            box[3] /= h
            if box[2] <= 0 or box[3] <= 0:
                continue
            c = ann["category_id"] - 1
            cls = COCO91_TO_80[c] if 0 <= c < 91 and COCO91_TO_80[c] is not None else c
            box = [cls] + box
            if box not in bboxes:
                bboxes.append(box)
        n_boxes += len(bboxes)
    t2 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("%.3f %.3f %d %d %d" % (t1 - t0, t2 - t1, len(images), n_boxes, rss))


if __name__ == "__main__":
    main()
