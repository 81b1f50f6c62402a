#!/usr/bin/python3
"""Dump reference outputs and gradients of the kern ops from PyTorch, for tiny shapes.

Writes tests/kernels/data/op_refs.bin, read by tests/kernels/test_torchref.c. Run with Debian's
python3-torch (`/usr/bin/python3 tests/kernels/make_op_refs.py`); the output is committed, so the
test needs no torch. Every op is written here from the recipe (docs/recipe.md S2-S3) with
plain torch calls; autograd supplies the gradients.

File layout (little-endian): magic b"KOPREF01", u32 version (1), u32 tensor count; then per
tensor: u16 name length, name (ASCII), u8 ndim, u32 dims[ndim], float32 data (row-major).
Integers (maxpool indices) are stored as float32; they are small and exact.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "op_refs.bin")


def main():
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    t = {}

    def put(name, x):
        t[name] = x.detach().to(torch.float32).contiguous().clone()

    def rnd(*shape, lo=-1.0, hi=1.0):
        return torch.rand(*shape) * (hi - lo) + lo

    # conv2d: the YOLOv5 stem (k6 s2 p2), k3 s2 p1 with bias (Detect-style bias), 1x1.
    for name, (xs, ws, s, p, bias) in {
        "conv_stem": ((2, 3, 12, 10), (4, 3, 6, 6), 2, 2, False),
        "conv_k3s2": ((2, 4, 7, 6), (5, 4, 3, 3), 2, 1, True),
        "conv_k1": ((2, 6, 5, 5), (3, 6, 1, 1), 1, 0, True),
    }.items():
        x = rnd(*xs).requires_grad_()
        w = rnd(*ws).requires_grad_()
        b = rnd(ws[0]).requires_grad_() if bias else None
        y = F.conv2d(x, w, b, stride=s, padding=p)
        r = rnd(*y.shape)
        (y * r).sum().backward()
        put(name + ".x", x), put(name + ".w", w), put(name + ".y", y), put(name + ".r", r)
        put(name + ".dx", x.grad), put(name + ".dw", w.grad)
        if bias:
            put(name + ".b", b), put(name + ".db", b.grad)

    # BatchNorm2d in training mode (eps 1e-3, momentum 0.03), alone and followed by SiLU.
    for name, silu in (("bn", False), ("bn_silu", True)):
        x = (rnd(3, 4, 5, 5) * 2 + rnd(1, 4, 1, 1)).requires_grad_()
        g = rnd(4, lo=0.5, hi=1.5).requires_grad_()
        be = rnd(4, lo=-0.5, hi=0.5).requires_grad_()
        rm0, rv0 = rnd(4, lo=-0.2, hi=0.2), rnd(4, lo=0.5, hi=1.5)
        rm, rv = rm0.clone(), rv0.clone()
        y = F.batch_norm(x, rm, rv, g, be, training=True, momentum=0.03, eps=1e-3)
        if silu:
            y = F.silu(y)
        r = rnd(*y.shape)
        (y * r).sum().backward()
        for k, v in (("x", x), ("gamma", g), ("beta", be), ("rm0", rm0), ("rv0", rv0),
                     ("y", y), ("r", r), ("rm", rm), ("rv", rv), ("dx", x.grad),
                     ("dgamma", g.grad), ("dbeta", be.grad)):
            put(name + "." + k, v)
        # eval mode with the updated running stats
        with torch.no_grad():
            ye = F.batch_norm(x, rm, rv, g, be, training=False, eps=1e-3)
            put(name + ".y_eval", F.silu(ye) if silu else ye)

    x = rnd(200, lo=-10, hi=10).requires_grad_()
    y = F.silu(x)
    r = rnd(200)
    (y * r).sum().backward()
    put("silu.x", x), put("silu.y", y), put("silu.r", r), put("silu.dx", x.grad)

    # SPPF's MaxPool2d(5, 1, 2) on inputs with many ties (integers 0..2).
    x = torch.randint(0, 3, (2, 3, 6, 7)).float().requires_grad_()
    y, idx = F.max_pool2d(x, 5, 1, 2, return_indices=True)
    r = rnd(*y.shape)
    (y * r).sum().backward()
    put("maxpool.x", x), put("maxpool.y", y), put("maxpool.idx", idx.float())
    put("maxpool.r", r), put("maxpool.dx", x.grad)

    x = rnd(2, 3, 4, 5).requires_grad_()
    y = F.interpolate(x, scale_factor=2, mode="nearest")
    r = rnd(*y.shape)
    (y * r).sum().backward()
    put("upsample.x", x), put("upsample.y", y), put("upsample.r", r), put("upsample.dx", x.grad)

    # BCE-with-logits (mean) on the class block of gathered (n, 85) rows.
    x = rnd(5, 85, lo=-6, hi=6).requires_grad_()
    tg = rnd(5, 80, lo=0, hi=1)
    loss = F.binary_cross_entropy_with_logits(x[:, 5:], tg, pos_weight=torch.ones(1))
    (loss * 0.5).backward()
    put("bce.x", x), put("bce.t", tg), put("bce.loss", loss.reshape(1)), put("bce.dx", x.grad)

    # CIoU exactly as the recipe S3 states (ultralytics bbox_iou, xywh, CIoU=True).
    def ciou(box1, box2, eps=1e-7):
        (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
        w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
        b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
        b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
        inter = (torch.min(b1_x2, b2_x2) - torch.max(b1_x1, b2_x1)).clamp(0) * \
                (torch.min(b1_y2, b2_y2) - torch.max(b1_y1, b2_y1)).clamp(0)
        union = w1 * h1 + w2 * h2 - inter + eps
        iou = inter / union
        cw = torch.max(b1_x2, b2_x2) - torch.min(b1_x1, b2_x1)
        ch = torch.max(b1_y2, b2_y2) - torch.min(b1_y1, b2_y1)
        c2 = cw ** 2 + ch ** 2 + eps
        rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
        v = (4 / math.pi ** 2) * torch.pow(torch.atan(w2 / h2) - torch.atan(w1 / h1), 2)
        with torch.no_grad():
            alpha = v / (v - iou + (1 + eps))
        return iou - (rho2 / c2 + v * alpha)

    n = 40
    b2 = torch.cat([rnd(n, 2, lo=-0.5, hi=1.5), rnd(n, 2, lo=0.3, hi=5)], 1)
    b1 = torch.cat([b2[:, :2] + rnd(n, 2, lo=-2, hi=2), b2[:, 2:] * rnd(n, 2, lo=0.3, hi=3)], 1)
    b1[0] = b2[0]                                # identical: every min/max ties
    b1[1] = torch.tensor([0.0, 0.0, 2.0, 2.0])   # touching edges: x2 of one = x1 of the other
    b2[1] = torch.tensor([2.0, 0.0, 2.0, 2.0])
    b1[2] = torch.tensor([0.5, 0.5, 1.0, 3.0])   # same x extent, different y
    b2[2] = torch.tensor([0.5, 0.7, 1.0, 1.0])
    b1 = b1.clone().requires_grad_()
    b2 = b2.clone().requires_grad_()
    c = ciou(b1, b2).squeeze(-1)
    r = rnd(n)
    (c * r).sum().backward()
    put("ciou.b1", b1), put("ciou.b2", b2), put("ciou.c", c), put("ciou.r", r)
    put("ciou.db1", b1.grad), put("ciou.db2", b2.grad)

    # Detect: permute and inference decode (no = 7, P3 anchors in grid units, stride 8).
    bs, na, no, ny, nx, stride = 2, 3, 7, 3, 4, 8.0
    anchors = torch.tensor([[1.25, 1.625], [2.0, 3.75], [4.125, 2.875]])
    raw = rnd(bs, na * no, ny, nx, lo=-4, hi=4)
    p = raw.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
    yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32),
                            torch.arange(nx, dtype=torch.float32), indexing="ij")
    grid = torch.stack((xv, yv), 2).expand(1, na, ny, nx, 2) - 0.5
    anchor_grid = (anchors * stride).view(1, na, 1, 1, 2).expand(1, na, ny, nx, 2)
    xy, wh, conf = p.sigmoid().split((2, 2, no - 4), 4)
    xy = (xy * 2 + grid) * stride
    wh = (wh * 2) ** 2 * anchor_grid
    out = torch.cat((xy, wh, conf), 4)
    put("detect.raw", raw), put("detect.p", p), put("detect.anchors", anchors)
    put("detect.out", out)

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(b"KOPREF01")
        f.write(struct.pack("<II", 1, len(t)))
        for name, v in t.items():
            nb = name.encode("ascii")
            f.write(struct.pack("<H", len(nb)) + nb + struct.pack("<B", v.dim()))
            f.write(struct.pack("<%dI" % v.dim(), *v.shape))
            f.write(v.numpy().astype("<f4").tobytes())
    print("wrote %s: %d tensors, %d bytes, torch %s" % (OUT, len(t), os.path.getsize(OUT),
                                                        torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
