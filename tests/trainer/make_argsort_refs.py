#!/usr/bin/python3
"""Writes tests/trainer/data_augment/argsort_refs.txt: np.argsort of float64 arrays as numpy 1.24
(Debian bookworm's python3-numpy) orders them, for trn_aug_argsort_np (trainer/data/augment.c), which
val.py's rect batching depends on through ar.argsort(): ties, which most aspect ratios are
(4:3, 3:4, 16:9 ...), land in that algorithm's order, not index order.

    /usr/bin/python3 tests/trainer/make_argsort_refs.py [COCO128_DIR]

Each line: "KIND n v_0 ... v_{n-1} : o_0 ... o_{n-1}", KIND q (the default, quicksort) or h
(kind='heapsort', the introsort's fallback), values in repr (exact float64). The arrays
are random with heavy ties at every size around the algorithm's thresholds (16-element insertion
sort, partitions), plus, when COCO128_DIR is given, coco128's h/w aspect ratios in file order.
"""
import os
import random
import sys

import numpy as np

assert np.__version__.startswith("1.24"), "the reference is numpy 1.24's introsort"
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_augment", "argsort_refs.txt")
rng = random.Random(20261127)
lines = []


def add(v, kind="quicksort"):
    a = np.array(v, dtype=np.float64)
    o = np.argsort(a, kind=kind)  # 'quicksort': numpy's default, as val.py calls it
    lines.append("%s %d %s : %s" % (kind[0], len(v), " ".join(repr(float(x)) for x in v),
                                    " ".join(str(int(i)) for i in o)))


common = [0.75, 1.3333333333333333, 0.5625, 1.0, 0.6666666666666666, 1.5, 0.8, 1.25]
for n in [1, 2, 3, 4, 15, 16, 17, 18, 19, 31, 32, 33, 64, 100, 127, 128, 129, 257, 1000]:
    for trial in range(3):
        kinds = trial % 3
        if kinds == 0:
            v = [rng.choice(common) for _ in range(n)]  # few distinct values
        elif kinds == 1:
            v = [rng.randint(1, 640) / rng.randint(1, 640) for _ in range(n)]
        else:
            v = [rng.choice(common[:2]) if rng.random() < 0.7 else rng.random() for _ in range(n)]
        add(v)
        if n in (17, 100, 1000):
            add(v, "heapsort")
add(list(range(200, 0, -1)))
add([1.0] * 300)
if len(sys.argv) > 1:
    import cv2
    d = os.path.join(sys.argv[1], "images", "train2017")
    ar = []
    for f in sorted(os.listdir(d)):
        h, w = cv2.imread(os.path.join(d, f)).shape[:2]
        ar.append(h / w)
    add(ar)
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("%d arrays -> %s" % (len(lines), out))
