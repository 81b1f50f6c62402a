#!/usr/bin/env python3
"""The training data pipeline of ultralytics/yolov5 v7.0 in Python + OpenCV, for scripts/bench-loader.

Restated from the recipe (../shared/docs/yolov5-recipe.md S5, hyp.scratch-low), not copied:
load_image (cv2.imread, long side to --img with INTER_LINEAR, or the decoded images kept in RAM
as train.py --cache ram does), load_mosaic (1280 x 1280 canvas of 114, centre U(320, 960), this
index plus 3 drawn with replacement, shuffled), random_perspective (scale U(0.5, 1.5), translate
0.1, cv2.warpAffine bilinear with border 114; boxes by their corners, box_candidates),
augment_hsv (cv2.cvtColor BGR<->HSV and cv2.LUT with gains 1 + U(-1, 1) (0.015, 0.7, 0.4)),
fliplr p 0.5, labels to normalised xywh, BGR -> RGB and HWC -> CHW, collated by a torch
DataLoader with N worker processes as ultralytics' InfiniteDataLoader. cv2.setNumThreads(0) as
ultralytics sets it.

Usage: bench_ultra_loader.py DATASET_DIR --img 640 --batch 16 --workers 2 --seconds 10
[--cache ram] [--json]. DATASET_DIR has images/train2017 and labels/train2017 (YOLO layout).
Prints images/s over --seconds after the first batch (worker start-up and the RAM cache are not
timed).
"""
import argparse
import glob
import json
import os
import random
import sys
import time

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

cv2.setNumThreads(0)


def read_labels(path):
    """YOLO txt rows (class cx cy w h), normalised; polygons reduced to their boxes."""
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                v = [float(x) for x in line.split()]
                if len(v) == 5:
                    rows.append(v)
                elif len(v) > 5:
                    xy = np.array(v[1:]).reshape(-1, 2)
                    x0, y0 = xy.min(0)
                    x1, y1 = xy.max(0)
                    rows.append([v[0], (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])
    return np.array(rows, dtype=np.float32).reshape(-1, 5)


class Mosaics(Dataset):
    def __init__(self, root, img, cache):
        self.files = sorted(glob.glob(os.path.join(root, "images", "train2017", "*.jpg")))
        if not self.files:
            sys.exit(f"bench_ultra_loader: no images under {root}/images/train2017")
        lab = os.path.join(root, "labels", "train2017")
        self.labels = [read_labels(os.path.join(lab, os.path.splitext(os.path.basename(f))[0] + ".txt"))
                       for f in self.files]
        self.s = img
        self.cache = [self._read(i) for i in range(len(self.files))] if cache else None

    def __len__(self):
        return len(self.files)

    def _read(self, i):
        im = cv2.imread(self.files[i])
        h0, w0 = im.shape[:2]
        r = self.s / max(h0, w0)
        if r != 1:
            im = cv2.resize(im, (int(w0 * r), int(h0 * r)), interpolation=cv2.INTER_LINEAR)
        return im

    def load_image(self, i):
        return self.cache[i] if self.cache is not None else self._read(i)

    def mosaic(self, index):
        s = self.s
        yc, xc = (int(random.uniform(s // 2, 3 * s // 2)) for _ in range(2))
        ids = [index] + random.choices(range(len(self.files)), k=3)
        random.shuffle(ids)
        canvas = np.full((2 * s, 2 * s, 3), 114, dtype=np.uint8)
        boxes = []
        for k, i in enumerate(ids):
            im = self.load_image(i)
            h, w = im.shape[:2]
            if k == 0:  # bottom-right corner at the centre
                x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
                x1b, y1b = w - (x2a - x1a), h - (y2a - y1a)
            elif k == 1:  # bottom-left
                x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
                x1b, y1b = 0, h - (y2a - y1a)
            elif k == 2:  # top-right
                x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(2 * s, yc + h)
                x1b, y1b = w - (x2a - x1a), 0
            else:  # top-left
                x1a, y1a, x2a, y2a = xc, yc, min(xc + w, 2 * s), min(2 * s, yc + h)
                x1b, y1b = 0, 0
            canvas[y1a:y2a, x1a:x2a] = im[y1b:y1b + (y2a - y1a), x1b:x1b + (x2a - x1a)]
            padw, padh = x1a - x1b, y1a - y1b
            lab = self.labels[i].copy()
            if len(lab):
                xy = np.empty((len(lab), 4), np.float32)
                xy[:, 0] = w * (lab[:, 1] - lab[:, 3] / 2) + padw
                xy[:, 1] = h * (lab[:, 2] - lab[:, 4] / 2) + padh
                xy[:, 2] = w * (lab[:, 1] + lab[:, 3] / 2) + padw
                xy[:, 3] = h * (lab[:, 2] + lab[:, 4] / 2) + padh
                boxes.append(np.concatenate([lab[:, :1], xy], 1))
        labels = np.concatenate(boxes, 0) if boxes else np.zeros((0, 5), np.float32)
        np.clip(labels[:, 1:], 0, 2 * s, out=labels[:, 1:])
        return canvas, labels

    def perspective(self, im, labels):
        s = self.s
        C = np.eye(3)
        C[0, 2], C[1, 2] = -s, -s
        R = np.eye(3)
        R[:2] = cv2.getRotationMatrix2D(angle=random.uniform(0, 0), center=(0, 0),
                                        scale=random.uniform(0.5, 1.5))
        T = np.eye(3)
        T[0, 2] = random.uniform(0.4, 0.6) * s
        T[1, 2] = random.uniform(0.4, 0.6) * s
        M = T @ R @ C
        im = cv2.warpAffine(im, M[:2], dsize=(s, s), borderValue=(114, 114, 114))
        n = len(labels)
        if n:
            xy = np.ones((n * 4, 3))
            xy[:, :2] = labels[:, [1, 2, 3, 4, 1, 4, 3, 2]].reshape(n * 4, 2)
            xy = (xy @ M.T)[:, :2].reshape(n, 8)
            x, y = xy[:, [0, 2, 4, 6]], xy[:, [1, 3, 5, 7]]
            new = np.concatenate((x.min(1), y.min(1), x.max(1), y.max(1))).reshape(4, n).T
            new[:, [0, 2]] = new[:, [0, 2]].clip(0, s)
            new[:, [1, 3]] = new[:, [1, 3]].clip(0, s)
            w0, h0 = labels[:, 3] - labels[:, 1], labels[:, 4] - labels[:, 2]
            w1, h1 = new[:, 2] - new[:, 0], new[:, 3] - new[:, 1]
            sc = R[0, 0]
            ar = np.maximum(w1 / (h1 + 1e-16), h1 / (w1 + 1e-16))
            keep = (w1 > 2) & (h1 > 2) & (w1 * h1 / (w0 * sc * h0 * sc + 1e-16) > 0.1) & (ar < 100)
            labels = labels[keep]
            labels[:, 1:5] = new[keep]
        return im, labels

    @staticmethod
    def hsv(im):
        r = np.random.uniform(-1, 1, 3) * [0.015, 0.7, 0.4] + 1
        hue, sat, val = cv2.split(cv2.cvtColor(im, cv2.COLOR_BGR2HSV))
        x = np.arange(0, 256, dtype=r.dtype)
        lut_h = ((x * r[0]) % 180).astype(np.uint8)
        lut_s = np.clip(x * r[1], 0, 255).astype(np.uint8)
        lut_v = np.clip(x * r[2], 0, 255).astype(np.uint8)
        merged = cv2.merge((cv2.LUT(hue, lut_h), cv2.LUT(sat, lut_s), cv2.LUT(val, lut_v)))
        cv2.cvtColor(merged, cv2.COLOR_HSV2BGR, dst=im)

    def __getitem__(self, index):
        im, labels = self.perspective(*self.mosaic(index))
        self.hsv(im)
        s = self.s
        n = len(labels)
        out = torch.zeros((n, 6))
        if n:
            xywh = np.empty((n, 4), np.float32)
            b = labels[:, 1:5].clip(0, s - 1e-3)
            xywh[:, 0] = (b[:, 0] + b[:, 2]) / 2 / s
            xywh[:, 1] = (b[:, 1] + b[:, 3]) / 2 / s
            xywh[:, 2] = (b[:, 2] - b[:, 0]) / s
            xywh[:, 3] = (b[:, 3] - b[:, 1]) / s
            if random.random() < 0.5:
                im = np.fliplr(im)
                xywh[:, 0] = 1 - xywh[:, 0]
            out[:, 1] = torch.from_numpy(labels[:, 0])
            out[:, 2:] = torch.from_numpy(xywh)
        elif random.random() < 0.5:
            im = np.fliplr(im)
        im = np.ascontiguousarray(im.transpose((2, 0, 1))[::-1])
        return torch.from_numpy(im), out

    @staticmethod
    def collate(batch):
        ims, labels = zip(*batch)
        for i, lb in enumerate(labels):
            lb[:, 0] = i
        return torch.stack(ims, 0), torch.cat(labels, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--img", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--cache", choices=["ram"], default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = Mosaics(a.root, a.img, a.cache == "ram")
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                    collate_fn=Mosaics.collate, persistent_workers=True, drop_last=False)
    it, n, t0 = None, 0, None
    while True:
        if it is None:
            it = iter(dl)
        try:
            ims, _ = next(it)
        except StopIteration:
            it = None
            continue
        if t0 is None:  # after the first batch: the workers are up
            t0 = time.perf_counter()
            continue
        n += ims.shape[0]
        if time.perf_counter() - t0 >= a.seconds:
            break
    dt = time.perf_counter() - t0
    res = {"images_per_s": n / dt, "images": n, "seconds": dt, "workers": a.workers,
           "cache": a.cache or "none"}
    print(json.dumps(res) if a.json else f"{n / dt:.1f} images/s ({a.workers} workers, cache {res['cache']})")


if __name__ == "__main__":
    main()
