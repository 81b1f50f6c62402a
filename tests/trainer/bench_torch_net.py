#!/usr/bin/env python3
"""PyTorch CPU eager timing of one YOLOv5 training step (forward + backward, train mode).

The baseline for build/tests/trainer/test_net_bench: the same model (yolov5n by default, our own
re-implementation of ../shared/docs/recipe.md S2: Conv = conv + BN(eps 1e-3, momentum
0.03) + SiLU, C3, SPPF, nearest upsample, concat, Detect 1x1 convs and the (bs, na, ny, nx, no)
permute), the same input shape, batch and thread count (torch.set_num_threads), random weights.
Timing only: nothing here is compared for values (tests/trainer/make_parity_ref.py does that).

Usage: bench_torch_net.py [IMG [BATCH [THREADS [ITERS [DEPTH WIDTH]]]]]
  defaults 320 8 1 3, depth 0.33 and width 0.25 (yolov5n; yolov5s is 0.33 0.50).
Prints one line: forward, backward, forward+backward ms (best of ITERS after one warm-up) and
img/s, in the format of test_net_bench, for scripts/bench-cpu-train to read.
"""
import math
import sys
import time

import torch
import torch.nn as nn


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(c_, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = int(c2 * 0.5)
        self.cv1 = Conv(c1, c_)
        self.cv2 = Conv(c1, c_)
        self.cv3 = Conv(2 * c_, c2)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, 1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_)
        self.cv2 = Conv(c_ * 4, c2)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class YOLOv5(nn.Module):
    """yolov5{n,s,m,l,x}.yaml (v6.0 layout): backbone and PANet head, three Detect levels."""

    def __init__(self, depth=0.33, width=0.25, nc=80):
        super().__init__()

        def n(k):
            return max(round(k * depth), 1) if k > 1 else k

        def c(k):
            return math.ceil(k * width / 8) * 8

        layers = [
            Conv(3, c(64), 6, 2, 2), Conv(c(64), c(128), 3, 2), C3(c(128), c(128), n(3)),
            Conv(c(128), c(256), 3, 2), C3(c(256), c(256), n(6)), Conv(c(256), c(512), 3, 2),
            C3(c(512), c(512), n(9)), Conv(c(512), c(1024), 3, 2), C3(c(1024), c(1024), n(3)),
            SPPF(c(1024), c(1024), 5),
            Conv(c(1024), c(512), 1, 1), nn.Upsample(None, 2, "nearest"), None,
            C3(c(1024), c(512), n(3), False),
            Conv(c(512), c(256), 1, 1), nn.Upsample(None, 2, "nearest"), None,
            C3(c(512), c(256), n(3), False),
            Conv(c(256), c(256), 3, 2), None, C3(c(512), c(512), n(3), False),
            Conv(c(512), c(512), 3, 2), None, C3(c(1024), c(1024), n(3), False),
        ]
        self.m = nn.ModuleList(nn.Identity() if m is None else m for m in layers)
        self.concat = {12: (11, 6), 16: (15, 4), 19: (18, 14), 22: (21, 10)}
        self.no = nc + 5
        self.detect = nn.ModuleList(nn.Conv2d(ci, 3 * self.no, 1) for ci in (c(256), c(512), c(1024)))

    def forward(self, x):
        y = []
        for i, m in enumerate(self.m):
            x = torch.cat([y[j] for j in self.concat[i]], 1) if i in self.concat else m(x)
            y.append(x)
        out = []
        for det, j in zip(self.detect, (17, 20, 23)):
            t = det(y[j])
            bs, _, ny, nx = t.shape
            out.append(t.view(bs, 3, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


def main():
    a = sys.argv[1:]
    img = int(a[0]) if len(a) > 0 else 320
    bs = int(a[1]) if len(a) > 1 else 8
    threads = int(a[2]) if len(a) > 2 else 1
    iters = int(a[3]) if len(a) > 3 else 3
    depth = float(a[4]) if len(a) > 4 else 0.33
    width = float(a[5]) if len(a) > 5 else 0.25
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = YOLOv5(depth, width).train()
    x = torch.rand(bs, 3, img, img)
    best_f = best_b = math.inf
    for it in range(iters + 1):  # iteration 0 warms up
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        # A fixed small gradient into every head output, as test_net_bench feeds.
        model.zero_grad(set_to_none=False)
        torch.autograd.backward(out, [torch.full_like(o, 1e-4) for o in out])
        t2 = time.perf_counter()
        if it:
            best_f = min(best_f, t1 - t0)
            best_b = min(best_b, t2 - t1)
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} params {params} img {img} batch {bs} threads {threads}: "
          f"train forward {best_f * 1e3:.1f} ms, backward {best_b * 1e3:.1f} ms, "
          f"forward+backward {(best_f + best_b) * 1e3:.1f} ms "
          f"({bs / (best_f + best_b):.2f} img/s) (best of {iters})")


if __name__ == "__main__":
    main()
