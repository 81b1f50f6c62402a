#!/usr/bin/python3
"""Write tests/trainer/data_augment/refs.bin: reference outputs of YOLOv5's augmentations.

The functions below re-implement ultralytics/yolov5 v7.0's load_mosaic, random_perspective,
box_candidates, resample_segments, segment2box, mixup, augment_hsv, letterbox, xyxy2xywhn and
the rect batch shapes from the written recipe (docs/recipe.md S5, S6), calling OpenCV
(cv2.warpAffine, warpPerspective, cvtColor, LUT, resize, copyMakeBorder) exactly where
ultralytics does and keeping numpy's float32 label arrays as ultralytics does. Every random draw
is fixed here and stored, so tests/trainer/test_augment.c can run the C code on the same inputs.

Input images are not stored: gen_image() is a small integer hash that test_augment.c repeats
bit for bit. Images are RGB; ultralytics works on BGR, which only matters for HSV, where the
reference converts RGB -> BGR, runs augment_hsv as ultralytics does, and converts back.

Run with Debian's python3-opencv and numpy: /usr/bin/python3 tests/trainer/make_augment_refs.py
File format (little-endian): b"AUGREF01", u32 entry count, then per entry: u16 name length,
name (ASCII), u8 type (1 u8, 2 f32, 3 f64, 4 i32), u8 ndim, u32 dims[ndim], the data.
"""
import math
import os
import struct
import sys

import cv2
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_augment", "refs.bin")
M32 = 0xFFFFFFFF

# ---------------------------------------------------------------------------------------------
# deterministic inputs (mirrored in test_augment.c)


def gen_image(w, h, seed):
    """RGB uint8 h x w: flat-gradient blocks and hash-noise blocks (both stress the warps)."""
    y, x, c = np.meshgrid(np.arange(h, dtype=np.uint32), np.arange(w, dtype=np.uint32),
                          np.arange(3, dtype=np.uint32), indexing="ij")
    s = np.uint32((seed * 2654435761) & M32)
    v = (x * np.uint32(73856093)) ^ (y * np.uint32(19349663)) ^ (c * np.uint32(83492791)) ^ s
    v = v ^ (v >> np.uint32(13))
    v = v * np.uint32(0x5BD1E995)
    v = v ^ (v >> np.uint32(15))
    noise = v & np.uint32(255)
    grad = (x * np.uint32(255) // np.uint32(max(w - 1, 1)) + y * np.uint32(128) //
            np.uint32(max(h - 1, 1)) + c * np.uint32(60)) % np.uint32(256)
    block = ((x // np.uint32(8) + y // np.uint32(8) + np.uint32(seed)) % np.uint32(3)) == 0
    return np.where(block, noise, grad).astype(np.uint8)


class Rng:
    """A fixed pseudo-random source for choosing test parameters (not the training RNG)."""

    def __init__(self, seed):
        self.r = np.random.RandomState(seed)

    def u(self, a, b):
        return float(self.r.uniform(a, b))

    def i(self, a, b):
        return int(self.r.randint(a, b + 1))


def make_labels(rng, n, with_segments):
    """n labels (class, cx, cy, w, h) normalised float32, with polygons when asked (the box is
    then the polygon's extent, as ultralytics' segments2boxes)."""
    labels, segs = [], []
    for _ in range(n):
        cls = rng.i(0, 79)
        cx, cy = rng.u(0.1, 0.9), rng.u(0.1, 0.9)
        bw, bh = rng.u(0.05, 0.6), rng.u(0.05, 0.6)
        if with_segments:
            k = rng.i(3, 12)
            ang = np.sort(np.array([rng.u(0, 2 * math.pi) for _ in range(k)]))
            rad = np.array([rng.u(0.5, 1.0) for _ in range(k)])
            px = np.clip(cx + 0.5 * bw * rad * np.cos(ang), 0, 1)
            py = np.clip(cy + 0.5 * bh * rad * np.sin(ang), 0, 1)
            seg = np.stack([px, py], 1).astype(np.float32)
            x0, y0 = seg[:, 0].min(), seg[:, 1].min()
            x1, y1 = seg[:, 0].max(), seg[:, 1].max()
            labels.append([cls, (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])
            segs.append(seg)
        else:
            x0, x1 = max(cx - bw / 2, 0), min(cx + bw / 2, 1)
            y0, y1 = max(cy - bh / 2, 0), min(cy + bh / 2, 1)
            labels.append([cls, (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])
    return np.array(labels, dtype=np.float32).reshape(-1, 5), segs


# ---------------------------------------------------------------------------------------------
# the recipe, re-implemented


def xywhn2xyxy(x, w, h, padw=0, padh=0):
    y = np.copy(x)
    y[:, 0] = w * (x[:, 0] - x[:, 2] / 2) + padw
    y[:, 1] = h * (x[:, 1] - x[:, 3] / 2) + padh
    y[:, 2] = w * (x[:, 0] + x[:, 2] / 2) + padw
    y[:, 3] = h * (x[:, 1] + x[:, 3] / 2) + padh
    return y


def xyn2xy(x, w, h, padw=0, padh=0):
    y = np.copy(x)
    y[:, 0] = w * x[:, 0] + padw
    y[:, 1] = h * x[:, 1] + padh
    return y


def xyxy2xywhn(x, w, h, clip=False, eps=0.0):
    if clip:
        x[:, [0, 2]] = x[:, [0, 2]].clip(0, w - eps)
        x[:, [1, 3]] = x[:, [1, 3]].clip(0, h - eps)
    y = np.copy(x)
    y[:, 0] = ((x[:, 0] + x[:, 2]) / 2) / w
    y[:, 1] = ((x[:, 1] + x[:, 3]) / 2) / h
    y[:, 2] = (x[:, 2] - x[:, 0]) / w
    y[:, 3] = (x[:, 3] - x[:, 1]) / h
    return y


def resample_segments(segments, n=1000):
    out = []
    for s in segments:
        s = np.concatenate((s, s[0:1, :]), axis=0)
        x = np.linspace(0, len(s) - 1, n)
        xp = np.arange(len(s))
        out.append(np.stack([np.interp(x, xp, s[:, i]) for i in range(2)], 1))
    return out


def segment2box(segment, width, height):
    x, y = segment.T
    inside = (x >= 0) & (y >= 0) & (x <= width) & (y <= height)
    x, y = x[inside], y[inside]
    return np.array([x.min(), y.min(), x.max(), y.max()]) if any(x) else np.zeros(4)


def box_candidates(box1, box2, wh_thr=2, ar_thr=100, area_thr=0.1, eps=1e-16):
    w1, h1 = box1[2] - box1[0], box1[3] - box1[1]
    w2, h2 = box2[2] - box2[0], box2[3] - box2[1]
    ar = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (ar < ar_thr)


def persp_matrix(src_w, src_h, width, height, d):
    C = np.eye(3)
    C[0, 2] = -src_w / 2
    C[1, 2] = -src_h / 2
    P = np.eye(3)
    P[2, 0] = d["px"]
    P[2, 1] = d["py"]
    R = np.eye(3)
    R[:2] = cv2.getRotationMatrix2D(angle=d["angle"], center=(0, 0), scale=d["scale"])
    S = np.eye(3)
    S[0, 1] = math.tan(d["shx"] * math.pi / 180)
    S[1, 0] = math.tan(d["shy"] * math.pi / 180)
    T = np.eye(3)
    T[0, 2] = d["tx"] * width
    T[1, 2] = d["ty"] * height
    return T @ S @ R @ P @ C


def random_perspective(im, targets, segments, d, perspective, border=(0, 0)):
    height = im.shape[0] + border[0] * 2
    width = im.shape[1] + border[1] * 2
    M = persp_matrix(im.shape[1], im.shape[0], width, height, d)
    if (border[0] != 0) or (border[1] != 0) or (M != np.eye(3)).any():
        if perspective:
            im = cv2.warpPerspective(im, M, dsize=(width, height), borderValue=(114, 114, 114))
        else:
            im = cv2.warpAffine(im, M[:2], dsize=(width, height), borderValue=(114, 114, 114))
    n = len(targets)
    if n:
        use_segments = any(x.any() for x in segments)
        new = np.zeros((n, 4))
        if use_segments:
            segments = resample_segments(segments)
            for i, segment in enumerate(segments):
                xy = np.ones((len(segment), 3))
                xy[:, :2] = segment
                xy = xy @ M.T
                xy = xy[:, :2] / xy[:, 2:3] if perspective else xy[:, :2]
                new[i] = segment2box(xy, width, height)
        else:
            xy = np.ones((n * 4, 3))
            xy[:, :2] = targets[:, [1, 2, 3, 4, 3, 2, 1, 4]].reshape(n * 4, 2)
            xy = xy @ M.T
            xy = (xy[:, :2] / xy[:, 2:3] if perspective else xy[:, :2]).reshape(n, 8)
            x = xy[:, [0, 2, 4, 6]]
            y = xy[:, [1, 3, 5, 7]]
            new = np.concatenate((x.min(1), y.min(1), x.max(1), y.max(1))).reshape(4, n).T
            new[:, [0, 2]] = new[:, [0, 2]].clip(0, width)
            new[:, [1, 3]] = new[:, [1, 3]].clip(0, height)
        i = box_candidates(box1=targets[:, 1:5].T * d["scale"], box2=new.T,
                           area_thr=0.01 if use_segments else 0.10)
        targets = targets[i]
        targets[:, 1:5] = new[i]
    return im, targets, M


def load_mosaic(tiles, s, xc, yc, d, perspective):
    """tiles: 4 dicts (img, labels, segs) in placement order; d: the warp draws."""
    labels4, segments4 = [], []
    for i, t in enumerate(tiles):
        img = t["img"]
        h, w = img.shape[:2]
        if i == 0:
            img4 = np.full((s * 2, s * 2, img.shape[2]), 114, dtype=np.uint8)
            x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
            x1b, y1b, x2b, y2b = w - (x2a - x1a), h - (y2a - y1a), w, h
        elif i == 1:
            x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, s * 2), yc
            x1b, y1b, x2b, y2b = 0, h - (y2a - y1a), min(w, x2a - x1a), h
        elif i == 2:
            x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(s * 2, yc + h)
            x1b, y1b, x2b, y2b = w - (x2a - x1a), 0, w, min(y2a - y1a, h)
        else:
            x1a, y1a, x2a, y2a = xc, yc, min(xc + w, s * 2), min(s * 2, yc + h)
            x1b, y1b, x2b, y2b = 0, 0, min(w, x2a - x1a), min(y2a - y1a, h)
        img4[y1a:y2a, x1a:x2a] = img[y1b:y2b, x1b:x2b]
        padw, padh = x1a - x1b, y1a - y1b
        labels, segments = t["labels"].copy(), [x.copy() for x in t["segs"]]
        if labels.size:
            labels[:, 1:] = xywhn2xyxy(labels[:, 1:], w, h, padw, padh)
            segments = [xyn2xy(x, w, h, padw, padh) for x in segments]
        labels4.append(labels)
        segments4.extend(segments)
    labels4 = np.concatenate(labels4, 0)
    for x in (labels4[:, 1:], *segments4):
        np.clip(x, 0, 2 * s, out=x)
    canvas = img4.copy()
    img4, labels4, M = random_perspective(img4, labels4, segments4, d, perspective,
                                          border=(-s // 2, -s // 2))
    return img4, labels4, canvas


def augment_hsv_rgb(rgb, gains):
    """augment_hsv on the BGR view of an RGB image, with the gains r given."""
    im = np.ascontiguousarray(rgb[..., ::-1])
    r = np.array(gains, dtype=np.float64)
    hue, sat, val = cv2.split(cv2.cvtColor(im, cv2.COLOR_BGR2HSV))
    dtype = im.dtype
    x = np.arange(0, 256, dtype=r.dtype)
    lut_hue = ((x * r[0]) % 180).astype(dtype)
    lut_sat = np.clip(x * r[1], 0, 255).astype(dtype)
    lut_val = np.clip(x * r[2], 0, 255).astype(dtype)
    im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
    cv2.cvtColor(im_hsv, cv2.COLOR_HSV2BGR, dst=im)
    return np.ascontiguousarray(im[..., ::-1])


def letterbox(im, new_shape, auto=True, scaleFill=False, scaleup=True, stride=32):
    shape = im.shape[:2]
    if isinstance(new_shape, int):
        new_shape = (new_shape, new_shape)
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:
        r = min(r, 1.0)
    ratio = r, r
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if auto:
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)
    elif scaleFill:
        dw, dh = 0.0, 0.0
        new_unpad = (new_shape[1], new_shape[0])
        ratio = new_shape[1] / shape[1], new_shape[0] / shape[0]
    dw /= 2
    dh /= 2
    if shape[::-1] != new_unpad:
        im = cv2.resize(im, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    im = cv2.copyMakeBorder(im, top, bottom, left, right, cv2.BORDER_CONSTANT,
                            value=(114, 114, 114))
    return im, ratio, (dw, dh), (left, top)


def rect_shapes(hw, batch, img_size, stride, pad):
    s = np.array([[w, h] for h, w in hw], dtype=np.float64)  # ultralytics keeps (w, h)
    ar = s[:, 1] / s[:, 0]
    irect = ar.argsort(kind="stable")
    ar = ar[irect]
    n = len(hw)
    bi = np.floor(np.arange(n) / batch).astype(int)
    nb = bi[-1] + 1
    shapes = [[1, 1]] * nb
    for i in range(nb):
        ari = ar[bi == i]
        mini, maxi = ari.min(), ari.max()
        if maxi < 1:
            shapes[i] = [maxi, 1]
        elif mini > 1:
            shapes[i] = [1, 1 / mini]
    return irect, np.ceil(np.array(shapes) * img_size / stride + pad).astype(int) * stride


# ---------------------------------------------------------------------------------------------
# output


class Writer:
    TYPES = {np.dtype(np.uint8): 1, np.dtype(np.float32): 2, np.dtype(np.float64): 3,
             np.dtype(np.int32): 4}

    def __init__(self):
        self.entries = []

    def put(self, name, arr, dtype=None):
        a = np.ascontiguousarray(np.asarray(arr, dtype=dtype))
        if a.ndim == 0:
            a = a.reshape(1)
        self.entries.append((name, a))

    def write(self, path):
        out = [b"AUGREF01", struct.pack("<I", len(self.entries))]
        for name, a in self.entries:
            nb = name.encode()
            out.append(struct.pack("<H", len(nb)) + nb)
            out.append(struct.pack("<BB", self.TYPES[a.dtype], a.ndim))
            out.append(struct.pack("<%dI" % a.ndim, *a.shape))
            out.append(a.astype(a.dtype.newbyteorder("<")).tobytes())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"".join(out))


def draws(rng, degrees=0.0, translate=0.1, scale=0.5, shear=0.0, perspective=0.0):
    u = rng.u
    return {"px": u(-perspective, perspective), "py": u(-perspective, perspective),
            "angle": u(-degrees, degrees), "scale": u(1 - scale, 1 + scale),
            "shx": u(-shear, shear), "shy": u(-shear, shear),
            "tx": u(0.5 - translate, 0.5 + translate), "ty": u(0.5 - translate, 0.5 + translate)}


def put_draws(W, name, d):
    W.put(name, [d["px"], d["py"], d["angle"], d["scale"], d["shx"], d["shy"], d["tx"], d["ty"]],
          np.float64)


def put_tile(W, name, rng, seed, w, h, n, with_segments):
    labels, segs = make_labels(rng, n, with_segments)
    W.put(name + "/img", [seed, w, h], np.int32)
    W.put(name + "/labels", labels, np.float32)
    if with_segments:
        W.put(name + "/seg_n", [len(s) for s in segs], np.int32)
        W.put(name + "/seg_xy", np.concatenate(segs, 0) if segs else np.zeros((0, 2)), np.float32)
    return {"img": gen_image(w, h, seed), "labels": labels, "segs": segs}


def main():
    W = Writer()
    rng = Rng(20240605)

    # warpAffine: matrices covering rotation, scale up/down, shear, sub-pixel shifts, borders
    cases = []
    for k in range(6):
        sw, sh = rng.i(48, 96), rng.i(40, 90)
        dw, dh = rng.i(32, 56), rng.i(32, 56)
        d = draws(rng, degrees=[0, 10, 45, 180, 5, 30][k], scale=[0.5, 0.5, 0.2, 0.9, 0.5, 0.3][k],
                  shear=[0, 0, 10, 5, 20, 0][k], translate=0.3)
        M = persp_matrix(sw, sh, dw, dh, d)[:2]
        cases.append((sw, sh, dw, dh, M))
    cases.append((64, 48, 64, 48, np.array([[1, 0, 0.5], [0, 1, -0.25]], dtype=np.float64)))
    for k, (sw, sh, dw, dh, M) in enumerate(cases):
        src = gen_image(sw, sh, 100 + k)
        out = cv2.warpAffine(src, M, dsize=(dw, dh), borderValue=(114, 114, 114))
        W.put("affine/%d/src" % k, [100 + k, sw, sh, dw, dh], np.int32)
        W.put("affine/%d/M" % k, M, np.float64)
        W.put("affine/%d/out" % k, out)
    W.put("affine/count", len(cases), np.int32)

    # warpPerspective
    n_persp = 3
    for k in range(n_persp):
        sw, sh, dw, dh = rng.i(48, 96), rng.i(40, 90), rng.i(32, 48), rng.i(32, 48)
        d = draws(rng, degrees=20, scale=0.4, shear=5, perspective=[0.001, 0.0005, 0.002][k])
        M = persp_matrix(sw, sh, dw, dh, d)
        src = gen_image(sw, sh, 200 + k)
        out = cv2.warpPerspective(src, M, dsize=(dw, dh), borderValue=(114, 114, 114))
        W.put("persp/%d/src" % k, [200 + k, sw, sh, dw, dh], np.int32)
        W.put("persp/%d/M" % k, M, np.float64)
        W.put("persp/%d/out" % k, out)
    W.put("persp/count", n_persp, np.int32)

    # perspective matrix from draws (the C builds M itself)
    for k in range(4):
        d = draws(rng, degrees=30, scale=0.5, shear=10, perspective=0.001 * k)
        put_draws(W, "matrix/%d/draws" % k, d)
        W.put("matrix/%d/M" % k, persp_matrix(1280, 960, 640, 480, d), np.float64)
    W.put("matrix/count", 4, np.int32)

    # mosaic + random_perspective (load_mosaic), s = 48, with and without segments
    mos_cfg = [  # (with segments, degrees, shear, perspective, scale)
        (False, 0.0, 0.0, 0.0, 0.5), (True, 0.0, 0.0, 0.0, 0.5), (False, 15.0, 5.0, 0.0, 0.5),
        (True, 20.0, 3.0, 0.0, 0.3), (False, 5.0, 2.0, 0.0005, 0.5), (True, 0.0, 0.0, 0.0, 0.9)]
    s = 48
    for k, (segs, deg, shr, per, sc) in enumerate(mos_cfg):
        tiles = []
        for t in range(4):
            w = rng.i(20, 48) if t % 2 else 48
            h = 48 if t % 2 else rng.i(20, 48)
            tiles.append(put_tile(W, "mosaic/%d/tile%d" % (k, t), rng, 300 + 10 * k + t, w, h,
                                  rng.i(0, 6), segs))
        xc, yc = int(rng.u(s // 2, 2 * s - s // 2)), int(rng.u(s // 2, 2 * s - s // 2))
        d = draws(rng, degrees=deg, shear=shr, perspective=per, scale=sc)
        img, labels, canvas = load_mosaic(tiles, s, xc, yc, d, per != 0)
        W.put("mosaic/%d/cfg" % k, [s, xc, yc, int(segs), int(per != 0)], np.int32)
        put_draws(W, "mosaic/%d/draws" % k, d)
        W.put("mosaic/%d/canvas_crc" % k, [int(canvas.sum()) & 0x7FFFFFFF], np.int32)
        W.put("mosaic/%d/out" % k, img)
        W.put("mosaic/%d/labels" % k, labels.reshape(-1, 5), np.float32)
    W.put("mosaic/count", len(mos_cfg), np.int32)

    # HSV: 48 x 48 random colours (2304 of the 2^24) under several gains, some extreme
    hsv_gains = [(1.0, 1.0, 1.0), (1.015, 1.7, 1.4), (0.985, 0.3, 0.6), (1.01, 0.0, 1.2),
                 (0.9, 1.2, 0.0)]
    src = np.random.RandomState(7).randint(0, 256, (48, 48, 3)).astype(np.uint8)
    src[0, :8] = [[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255],
                  [128, 128, 128], [255, 255, 0], [1, 0, 0]]
    W.put("hsv/src", src)
    for k, g in enumerate(hsv_gains):
        W.put("hsv/%d/gain" % k, g, np.float64)
        W.put("hsv/%d/out" % k, augment_hsv_rgb(src, g))
    W.put("hsv/count", len(hsv_gains), np.int32)

    # mixup
    a, b = gen_image(48, 40, 401), gen_image(48, 40, 402)
    r = 0.4871234
    W.put("mixup/r", r, np.float64)
    W.put("mixup/out", (a * r + b * (1 - r)).astype(np.uint8))

    # letterbox: (w, h, new_h, new_w, auto, scaleFill, scaleup)
    lb = [(75, 52, 48, 48, 0, 0, 1), (37, 30, 48, 48, 0, 0, 1), (75, 52, 48, 48, 1, 0, 1),
          (67, 37, 48, 48, 0, 1, 1), (96, 72, 48, 48, 0, 0, 1), (37, 30, 48, 64, 0, 0, 0),
          (48, 35, 48, 48, 0, 0, 0), (27, 45, 64, 48, 0, 0, 1)]
    for k, (w, h, nh, nw, au, sf, su) in enumerate(lb):
        im = gen_image(w, h, 500 + k)
        out, ratio, pad, lt = letterbox(im, (nh, nw), auto=bool(au), scaleFill=bool(sf),
                                        scaleup=bool(su))
        W.put("letterbox/%d/cfg" % k, [500 + k, w, h, nh, nw, au, sf, su], np.int32)
        W.put("letterbox/%d/plan" % k, [ratio[0], ratio[1], pad[0], pad[1], lt[0], lt[1]],
              np.float64)
        W.put("letterbox/%d/out" % k, out)
    W.put("letterbox/count", len(lb), np.int32)

    # rect batch shapes (val: pad 0.5, stride 32, img 640)
    hw = [(rng.i(100, 800), rng.i(100, 800)) for _ in range(37)] + [(480, 640), (640, 480)] * 3
    order, shapes = rect_shapes(hw, 8, 640, 32, 0.5)
    W.put("rect/hw", hw, np.int32)
    W.put("rect/shapes", shapes, np.int32)

    # whole training samples: mosaic (+ mixup) -> xywhn -> HSV -> flips, s = 48
    samples = [(True, False, (1.01, 1.3, 0.8), 0, 1), (True, True, (0.99, 0.6, 1.2), 1, 1),
               (False, True, (1.005, 1.0, 1.0), 1, 0)]
    for k, (segs, mix, gains, fud, flr) in enumerate(samples):
        mosaics, all_labels, imgs = [], [], []
        for m in range(2 if mix else 1):
            tiles = [put_tile(W, "sample/%d/tile%d" % (k, 4 * m + t), rng, 600 + 10 * k + 4 * m + t,
                              rng.i(24, 48), rng.i(24, 48), rng.i(1, 5), segs) for t in range(4)]
            xc, yc = int(rng.u(24, 72)), int(rng.u(24, 72))
            d = draws(rng, degrees=3.0, shear=1.0)
            W.put("sample/%d/centre%d" % (k, m), [xc, yc], np.int32)
            put_draws(W, "sample/%d/draws%d" % (k, m), d)
            img, labels, _ = load_mosaic(tiles, s, xc, yc, d, False)
            imgs.append(img)
            all_labels.append(labels)
        img = imgs[0]
        labels = all_labels[0]
        r = 0.53125
        if mix:
            img = (img * r + imgs[1] * (1 - r)).astype(np.uint8)
            labels = np.concatenate((labels, all_labels[1]), 0)
        if len(labels):
            labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=s, h=s, clip=True, eps=1e-3)
        img = augment_hsv_rgb(img, gains)
        if fud:
            img = np.flipud(img)
            labels[:, 2] = 1 - labels[:, 2]
        if flr:
            img = np.fliplr(img)
            labels[:, 1] = 1 - labels[:, 1]
        W.put("sample/%d/cfg" % k, [s, int(segs), int(mix), fud, flr], np.int32)
        W.put("sample/%d/mix_r" % k, r, np.float64)
        W.put("sample/%d/gain" % k, gains, np.float64)
        W.put("sample/%d/out" % k, np.ascontiguousarray(img))
        W.put("sample/%d/labels" % k, labels.reshape(-1, 5), np.float32)
    W.put("sample/count", len(samples), np.int32)

    # non-mosaic training sample: letterbox(auto=False, scaleup=True) + random_perspective
    tile = put_tile(W, "single/tile", rng, 700, 60, 39, 5, False)
    d = draws(rng, degrees=8.0, shear=2.0)
    put_draws(W, "single/draws", d)
    im, ratio, pad, _ = letterbox(tile["img"], s, auto=False, scaleup=True)
    h, w = tile["img"].shape[:2]
    labels = tile["labels"].copy()
    labels[:, 1:] = xywhn2xyxy(labels[:, 1:], ratio[0] * w, ratio[1] * h, padw=pad[0], padh=pad[1])
    im, labels, _ = random_perspective(im, labels, (), d, False)
    labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=s, h=s, clip=True, eps=1e-3)
    W.put("single/out", im)
    W.put("single/labels", labels.reshape(-1, 5), np.float32)

    # validation sample: letterbox(auto=False, scaleup=False) to a rect shape
    tile = put_tile(W, "val/tile", rng, 800, 48, 33, 4, False)
    im, ratio, pad, _ = letterbox(tile["img"], (48, 64), auto=False, scaleup=False)
    labels = tile["labels"].copy()
    labels[:, 1:] = xywhn2xyxy(labels[:, 1:], ratio[0] * 48, ratio[1] * 33, padw=pad[0],
                               padh=pad[1])
    labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=im.shape[1], h=im.shape[0], clip=True, eps=1e-3)
    W.put("val/shape", [48, 64], np.int32)
    W.put("val/out", im)
    W.put("val/labels", labels, np.float32)

    W.write(OUT)
    print("wrote %s (%d entries, %d bytes), OpenCV %s, numpy %s" % (
        OUT, len(W.entries), os.path.getsize(OUT), cv2.__version__, np.__version__))


if __name__ == "__main__":
    sys.exit(main())
