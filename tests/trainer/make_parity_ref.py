#!/usr/bin/python3
"""Write tests/trainer/data_parity/yolov5n_128_b2.bin.zst: the PyTorch reference of one YOLOv5 training
start, which the C trainer is checked against (llm.c's train_gpt2.py / test_gpt2.c idea).

Everything below is re-implemented from the written recipe (docs/recipe.md S2-S4),
not from ultralytics code: the model parsed from models/yolov5n.yaml as parse_model does,
ComputeLoss (build_targets, CIoU, objectness, classes), smart_optimizer's three SGD groups, the
warmup schedule, clip_grad_norm_ and ModelEMA. Run with Debian's python3-torch (CPU):

    /usr/bin/python3 tests/trainer/make_parity_ref.py [--dtype float64|float32|bf16] [--out FILE]

THE CASE (all fixed, nothing random outside the Philox streams below)
  model   yolov5n, nc 80, 128x128, batch 2. Parameter names are ultralytics' state_dict keys.
  weights trn_model_init(seed 0) bit for bit (trainer/model/model.h: Philox4x32-10, counter
          [q lo, q hi, k, 0x6d6f646c], key [seed lo, seed hi], k = state_dict index including
          buffers, j = row-major element, q = j // 4, word j % 4, u = (r >> 8) * 2^-24,
          w = f32(f32(2u - 1) * f32(1 / sqrt(fan_in))), Detect priors added in float32, every
          float rounded to fp16). No weights are stored, except samples (init.*) to prove it.
  input   x[j] = trn_model_init_uniform(INPUT_SEED = 0, INPUT_K = 1000, j) for j over the
          row-major (2, 3, 128, 128) batch: the same generator with a tensor index no model uses,
          values in [0, 1). The dump keeps samples and statistics ("input"), not the pixels.
  targets TARGETS below: (image, class, cx, cy, w, h), normalised, exact binary fractions.
  bf16    (--dtype bf16, written to data_parity/yolov5n_128_b2_bf16.bin.zst: only what the training
          step's parity reads, the targets and the step.* / stepN.* entries, 256 elements of a
          tensor, so that it stays near 1 MB) PyTorch's eager AMP as
          train.py runs it on a GPU, here on the CPU: the model float32 in channels_last, the
          forward under torch.autocast(bfloat16), so that every conv runs in bf16 and every
          activation between layers is bf16 (BatchNorm and SiLU on bf16 tensors); the Detect
          outputs widened to float32 and the loss computed in float32 from them, as our trainer
          does (train.py computes it under autocast too: its ops on the bf16 outputs would round
          the loss's own arithmetic, which is not what this reference is for); backward, clip,
          optimizer and EMA in float32. The reference of the bf16 NHWC GPU executor (issue 41).
  compute float64 by default (--dtype): the weights, input and targets are float32 values, the
          network, loss, backward and optimizer run in float64 and are stored rounded to float32,
          so the reference is the exact answer to ~1e-7 and a float32 C implementation is judged
          by its own rounding only. build_targets runs in float32 as ultralytics (and the C side)
          does, because its decisions (anchor ratio < 4, cell, neighbours) are comparisons on
          float32 values.

CONVENTIONS (where PyTorch or the recipe leave a choice)
  duplicates  Two build_targets entries of one level that land on the same (b, a, gj, gi) cell:
          tobj keeps the LAST entry's clamped CIoU, in build_targets order (blocks centre, left,
          up, right, down; inside a block anchor-major, then target order). That is what
          sequential index assignment does (tobj[b, a, gj, gi] = iou on the CPU); this script
          does it explicitly, so the rule does not depend on PyTorch internals. The box and class
          losses use every entry (gradients of duplicates add up).
  min/max ties in CIoU follow PyTorch (torch.minimum/maximum send half the gradient to each
          side on a tie; clamp(min=0) passes the gradient where x >= 0).
  schedule epoch 0 of E = 300, nb = 100 batches per epoch, so nw = max(round(3 * nb), 100) = 300;
          the three optimizer steps are iterations ni = 0, 1, 2 on the SAME batch. lf(0) = 1
          (linear); lr of group 0 (biases) = interp(ni, [0, 300], [0.1, 0.01]); groups 1 (conv
          weights) and 2 (BN weights) = interp(ni, [0, 300], [0, 0.01]); momentum =
          interp(ni, [0, 300], [0.8, 0.937]) for every group.
  accumulate  The nominal accumulate is max(round(64 / 2), 1) = 32, which scales the weight
          decay: 5e-4 * 2 * 32 / 64 = 5e-4 for group 1. During warmup ultralytics uses
          accumulate = max(1, round(interp(ni, [0, 300], [1, 32]))) = 1 for ni = 0, 1, 2, so it
          steps after every batch (ni - last_step >= 1, last_step = -1 at start): the three
          steps here are exactly ultralytics' first three iterations, no deviation.
  clip    clip_grad_norm_(all parameters, 10.0): total = L2 norm of all gradients, coef =
          10 / (total + 1e-6), gradients scaled by min(coef, 1). The stored gradients and
          grad norm are BEFORE clipping.
  EMA     every floating state-dict entry (parameters, BN running mean/var, anchors) after each
          optimizer step: updates += 1; d = 0.9999 * (1 - exp(-updates / 2000));
          ema = d * ema + (1 - d) * model. The EMA starts as a copy of the initial model;
          num_batches_tracked is not floating and is not averaged (stays 0 in the EMA).
  BN      training mode every forward: batch statistics (biased variance) normalise, running
          stats += 0.03 * (batch - running) with the unbiased variance. Three forwards happen
          (one per step), so num_batches_tracked is 3 after step 3.
  loss    hyp gains after ultralytics' scaling for nl = 3, nc = 80, img 128:
          box 0.05, obj 1.0 * (128 / 640)^2 = 0.04, cls 0.5; balance 4, 1, 0.4; label
          smoothing 0; total = (0.05 lbox + 0.04 lobj + 0.5 lcls) * bs with the RAW sums below.

FILE FORMAT (version 1, little-endian; tests/trainer/parity_dump.h reads it)
  header, 32 bytes: "YV5PARITY\\0\\0\\0" (12), u32 version = 1, u32 entry count, u32 flags = 0,
          u64 file size in bytes.
  entries, one after another, each 184 bytes of header then its data:
          name (96 bytes, NUL-padded ASCII), u32 kind (0 FULL, 1 SAMPLED), u32 ndim (0..8),
          u32 shape[8] (unused dims 0), u64 numel (of the full tensor), u64 n_stored,
          f64 l2, f64 l1, f64 sum, f64 maxabs (of the full tensor, computed in float64 over the
          float32-rounded values), then n_stored float32 values.
  FULL    all numel values, row-major. Used when numel <= 4096, and always for the losses,
          targets, build_targets tensors and the Detect outputs and their gradients.
  SAMPLED n_stored = 2048 values at flat indices idx_i = (i * numel) // 2048 (integer
          arithmetic), i = 0..2047: the same indices for every tensor of a given numel, so the
          init, gradient and step samples of one parameter line up element by element.
  Integer tensors (indices, classes) are stored as float32 (exact).

ENTRIES
  input (2,3,128,128) SAMPLED; targets (8,6); hyp (8): box, obj, cls gains, balance 0..2,
  anchor_t, batch size.
  layer.<i> for i = 0..23: the row's output (N, C, H, W).
  detect.<l> (2, 3, ny, nx, 85) for l = 0..2: the raw Detect logits (training output), FULL.
  bt.<l>.{b, a, gj, gi, tcls} (n,), bt.<l>.tbox (n, 4) grid units (x, y relative to the cell),
          bt.<l>.anch (n, 2) grid units: build_targets per level, in its order.
  loss.<l>.{iou (n,) CIoU, tobj (2, 3, ny, nx), lbox (), lobj () before balance, lcls ()}.
  loss.lbox, loss.lobj (balanced sum), loss.lcls: RAW sums over levels, before the gains;
  loss.items (3): after the gains, before x bs, as ultralytics logs them; loss.total ().
  dloss.detect.<l>: d total / d detect.<l>, FULL (checks the loss backward alone).
  grad.<param>: d total / d param at the initial weights, before clipping, for every trainable
          parameter in state_dict order (the count equals trn_model's PARAM tensors).
  init.<param>: the initial weights (samples prove the generator matches trn_model_init).
  step.gradnorm (3), step.clip_coef (3), step.lr (3, 3) [step][group], step.momentum (3),
  step.ema_decay (3), step.loss (3, 4) [step][lbox, lobj, lcls raw, total]: loss at the
          weights before step s (step 0 = the initial weights).
  step<s>.delta.<param> for s = 1..3: weights after step s minus the initial weights, computed
          in the reference dtype (updates are ~1e-6 of the weights at warmup lrs, below float32
          resolution of the weights themselves; compare with atol ~ a few ulp of |w|).
  step3.param.<param>, step3.ema.<param>, step3.ema_delta.<param> (EMA minus initial),
  step3.buffer.<bn>.running_{mean,var}, step3.ema.<bn>.running_{mean,var},
  step3.num_batches_tracked (): the model after the third step.
"""
import argparse
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CFG = os.path.join(ROOT, "models", "yolov5n.yaml")
OUT = os.path.join(HERE, "data_parity", "yolov5n_128_b2.bin.zst")
OUT_BF16 = os.path.join(HERE, "data_parity", "yolov5n_128_b2_bf16.bin.zst")

MAGIC = b"YV5PARITY\0\0\0"
VERSION = 1
NAME_LEN = 96
FULL_MAX = 4096
N_SAMPLES = 2048

IMG = 128
BS = 2
WEIGHT_SEED = 0
INPUT_SEED = 0
INPUT_K = 1000
N_STEPS = 3
NB = 100  # batches per epoch, for the warmup length only
EPOCHS = 300

HYP = dict(lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=5e-4, warmup_epochs=3.0,
           warmup_momentum=0.8, warmup_bias_lr=0.1, box=0.05, cls=0.5, obj=1.0, anchor_t=4.0)

# (image, class, cx, cy, w, h), normalised; every value is an exact float32 (k / 256).
# Chosen to cover: small and large boxes, tall and wide aspects (some anchors rejected by
# anchor_t), boxes at the image border (cell clamp, missing neighbours), and two boxes of image 0
# whose centres share cells (duplicate tobj writes).
TARGETS = [
    (0, 0, 96 / 256, 80 / 256, 40 / 256, 56 / 256),     # medium
    (0, 17, 100 / 256, 84 / 256, 36 / 256, 48 / 256),   # same cells as the first: duplicates
    (0, 56, 200 / 256, 150 / 256, 200 / 256, 180 / 256),  # large, reaches P5
    (0, 2, 5 / 256, 250 / 256, 10 / 256, 8 / 256),     # tiny, in a corner
    (1, 79, 128 / 256, 64 / 256, 12 / 256, 150 / 256),  # tall and thin
    (1, 5, 60 / 256, 200 / 256, 180 / 256, 20 / 256),   # wide and flat
    (1, 33, 219 / 256, 37 / 256, 70 / 256, 66 / 256),   # square-ish, off-centre
    (1, 45, 141 / 256, 141 / 256, 26 / 256, 30 / 256),  # small, centre of the image
]

# ---------------------------------------------------------------------------------------------
# the weight generator (trainer/model/model.h)

M32 = np.uint64(0xFFFFFFFF)
INIT_STREAM_TAG = 0x6D6F646C


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Random123 Philox4x32-10 on arrays of uint32 counters; returns the four output words."""
    x = [np.asarray(v, dtype=np.uint64) & M32 for v in (c0, c1, c2, c3)]
    k = [np.uint64(k0), np.uint64(k1)]
    for rnd in range(10):
        if rnd:
            k = [(k[0] + np.uint64(0x9E3779B9)) & M32, (k[1] + np.uint64(0xBB67AE85)) & M32]
        p0 = np.uint64(0xD2511F53) * x[0]
        p1 = np.uint64(0xCD9E8D57) * x[2]
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k[0], p1 & M32, (p0 >> np.uint64(32)) ^ x[3] ^ k[1],
             p0 & M32]
    return x


def init_uniform(seed, k, n):
    """trn_model_init_uniform(seed, k, j) for j = 0..n-1, as float32."""
    j = np.arange(n, dtype=np.uint64)
    q = j >> np.uint64(2)
    words = philox4x32_10(q & M32, q >> np.uint64(32), np.full(n, k, dtype=np.uint64),
                          np.full(n, INIT_STREAM_TAG, dtype=np.uint64), seed & 0xFFFFFFFF,
                          seed >> 32)
    w = np.stack(words, axis=1)[np.arange(n), (j & np.uint64(3)).astype(np.int64)]
    return ((w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def fp16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# the model (recipe S2), with ultralytics' module names so state_dict keys match


def make_divisible(x, d):
    return int(math.ceil(x / d) * d)


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
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, e=1.0) for _ in range(n)))

    def forward(self, x):
        # the bottleneck branch first
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Concat(nn.Module):
    def forward(self, xs):
        return torch.cat(xs, 1)


class Detect(nn.Module):
    def __init__(self, nc, anchors, ch):
        super().__init__()
        self.nc, self.no, self.nl, self.na = nc, nc + 5, len(anchors), len(anchors[0]) // 2
        self.register_buffer("anchors", torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, xs):
        out = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            out.append(x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


class Model(nn.Module):
    """parse_model for the modules yolov5n uses; self.model is the row list as in ultralytics."""

    def __init__(self, cfg):
        super().__init__()
        d = yaml.safe_load(open(cfg))
        nc, gd, gw, anchors = d["nc"], d["depth_multiple"], d["width_multiple"], d["anchors"]
        no = (len(anchors[0]) // 2) * (nc + 5)
        ch, layers, self.froms = [3], [], []
        for i, (f, n, m, args) in enumerate(d["backbone"] + d["head"]):
            n = max(round(n * gd), 1) if n > 1 else n
            args = [nc if a == "nc" else anchors if a == "anchors" else a for a in args]
            if m in ("Conv", "C3", "SPPF"):
                c1, c2 = ch[f], args[0]
                if c2 != no:
                    c2 = make_divisible(c2 * gw, 8)
                if m == "Conv":
                    mod = Conv(c1, c2, *args[1:])
                elif m == "SPPF":
                    mod = SPPF(c1, c2, *args[1:])
                else:
                    mod = C3(c1, c2, n, *args[1:])
            elif m == "nn.Upsample":
                c2, mod = ch[f], nn.Upsample(scale_factor=args[1], mode=args[2])
            elif m == "Concat":
                c2, mod = sum(ch[x] for x in f), Concat()
            elif m == "Detect":
                c2, mod = None, Detect(args[0], args[1], [ch[x] for x in f])
            else:
                raise SystemExit(f"{cfg}: layer {i}: unknown module {m}")
            self.froms.append(f)
            layers.append(mod)
            if i == 0:
                ch = []
            ch.append(c2)
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        y = []
        for m, f in zip(self.model, self.froms):
            if f != -1:
                x = y[f] if isinstance(f, int) else [x if j == -1 else y[j] for j in f]
            x = m(x)
            y.append(x)
        return y  # every row's output; the last is the Detect list


def init_weights(model, seed, strides):
    """trn_model_init in numpy, written into the model (float32 values, fp16-representable)."""
    sd = model.state_dict()
    det = model.model[-1]
    with torch.no_grad():
        for k, (name, t) in enumerate(sd.items()):
            if name.endswith("num_batches_tracked"):
                t.zero_()
                continue
            if name.endswith(".anchors"):
                a = np.asarray(t.numpy(), dtype=np.float32) / np.asarray(
                    strides, dtype=np.float32).reshape(-1, 1, 1)
                t.copy_(torch.from_numpy(fp16(a)))
                continue
            mod_name, leaf = name.rsplit(".", 1)
            mod = model.get_submodule(mod_name)
            if isinstance(mod, nn.BatchNorm2d):
                t.fill_(1.0 if leaf in ("weight", "running_var") else 0.0)
                continue
            assert isinstance(mod, nn.Conv2d) and leaf in ("weight", "bias")
            fan_in = mod.in_channels * mod.kernel_size[0] * mod.kernel_size[1]
            bound = np.float32(1.0 / math.sqrt(fan_in))
            u = init_uniform(seed, k, t.numel())
            w = (np.float32(2.0) * u - np.float32(1.0)) * bound
            if leaf == "bias":  # Detect: _initialize_biases, in float32
                lvl = int(mod_name.rsplit(".", 1)[1])
                s = np.float32(strides[lvl])
                g = np.float32(640.0) / s
                r = np.float32(8.0) / (g * g)
                c_obj = np.float32(math.log(float(r)))
                c_cls = np.float32(math.log(0.6 / (det.nc - 0.99999)))
                w = w.reshape(det.na, det.no)
                w[:, 4] += c_obj
                w[:, 5:] += c_cls
            t.copy_(torch.from_numpy(fp16(w.reshape(t.shape))))


# ---------------------------------------------------------------------------------------------
# the loss (recipe S3)


def build_targets(p_shapes, targets, anchors, anchor_t):
    """ultralytics' build_targets in float32. Returns per level dict(b, a, gj, gi, tbox, anch,
    tcls) in its entry order."""
    na, nt = anchors.shape[1], targets.shape[0]
    gain = torch.ones(7)
    ai = torch.arange(na).float().view(na, 1).repeat(1, nt)
    t_all = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)  # (na, nt, 7)
    g = 0.5
    off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]]).float() * g
    out = []
    for i, shape in enumerate(p_shapes):
        anc = anchors[i]
        gain[2:6] = torch.tensor(shape, dtype=torch.float32)[[3, 2, 3, 2]]
        t = t_all * gain
        r = t[..., 4:6] / anc[:, None]
        keep = torch.max(r, 1 / r).max(2)[0] < anchor_t
        t = t[keep]
        gxy = t[:, 2:4]
        gxi = gain[[2, 3]] - gxy
        j, k = ((gxy % 1 < g) & (gxy > 1)).T
        l, m = ((gxi % 1 < g) & (gxi > 1)).T
        sel = torch.stack((torch.ones_like(j), j, k, l, m))
        t = t.repeat((5, 1, 1))[sel]
        offsets = (torch.zeros_like(gxy)[None] + off[:, None])[sel]
        bc, gxy, gwh, a = t[:, 0:2], t[:, 2:4], t[:, 4:6], t[:, 6]
        a, (b, c) = a.long().view(-1), bc.long().T
        gij = (gxy - offsets).long()
        gi = gij[:, 0].clamp(0, shape[3] - 1)
        gj = gij[:, 1].clamp(0, shape[2] - 1)
        gij = torch.stack((gi, gj), 1)
        out.append(dict(b=b, a=a, gj=gj, gi=gi, tbox=torch.cat((gxy - gij, gwh), 1),
                        anch=anc[a], tcls=c))
    return out


def ciou(box1, box2, eps=1e-7):
    """CIoU of (n, 4) xywh boxes, alpha without gradient (metrics.py bbox_iou, xywh mode)."""
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = (torch.minimum(b1_x2, b2_x2) - torch.maximum(b1_x1, b2_x1)).clamp(0) * \
        (torch.minimum(b1_y2, b2_y2) - torch.maximum(b1_y1, b2_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.maximum(b1_x2, b2_x2) - torch.minimum(b1_x1, b2_x1)
    ch = torch.maximum(b1_y2, b2_y2) - torch.minimum(b1_y1, b2_y1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
    v = (4 / math.pi ** 2) * torch.pow(torch.atan(w2 / h2) - torch.atan(w1 / h1), 2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return (iou - (rho2 / c2 + v * alpha)).squeeze(-1)


def compute_loss(p, bt, gains, balance, nc):
    """ComputeLoss.__call__; returns total, raw (lbox, lobj, lcls) and per-level details."""
    dt = p[0].dtype
    bce = nn.BCEWithLogitsLoss()
    lbox = torch.zeros((), dtype=dt)
    lobj = torch.zeros((), dtype=dt)
    lcls = torch.zeros((), dtype=dt)
    levels = []
    for i, pi in enumerate(p):
        e = bt[i]
        b, a, gj, gi = e["b"], e["a"], e["gj"], e["gi"]
        tobj = torch.zeros(pi.shape[:4], dtype=dt)
        n = b.shape[0]
        lv = dict(lbox=torch.zeros((), dtype=dt), lcls=torch.zeros((), dtype=dt),
                  iou=torch.zeros(0, dtype=dt))
        if n:
            ps = pi[b, a, gj, gi]
            pxy = ps[:, 0:2].sigmoid() * 2 - 0.5
            pwh = (ps[:, 2:4].sigmoid() * 2) ** 2 * e["anch"].to(dt)
            iou = ciou(torch.cat((pxy, pwh), 1), e["tbox"].to(dt))
            lv["lbox"] = (1.0 - iou).mean()
            lbox = lbox + lv["lbox"]
            score = iou.detach().clamp(0)
            # duplicates: the last entry in build_targets order wins (see the module doc)
            flat = ((b * pi.shape[1] + a) * pi.shape[2] + gj) * pi.shape[3] + gi
            tflat = tobj.view(-1)
            for q in range(n):
                tflat[flat[q]] = score[q]
            lv["iou"] = iou.detach()
            if nc > 1:
                t = torch.zeros_like(ps[:, 5:])
                t[range(n), e["tcls"]] = 1.0
                lv["lcls"] = bce(ps[:, 5:], t)
                lcls = lcls + lv["lcls"]
        lv["lobj"] = bce(pi[..., 4], tobj)
        lv["tobj"] = tobj
        lobj = lobj + lv["lobj"] * balance[i]
        levels.append(lv)
    bs = p[0].shape[0]
    total = (lbox * gains[0] + lobj * gains[1] + lcls * gains[2]) * bs
    return total, (lbox, lobj, lcls), levels


# ---------------------------------------------------------------------------------------------
# the dump


class Dump:
    def __init__(self, samples=N_SAMPLES, full_max=FULL_MAX, only=None):
        self.samples = samples  # elements kept of a larger tensor
        self.full_max = full_max  # tensors up to this size are kept whole
        self.only = only  # None, or the name prefixes to keep (others are dropped)
        self.entries = []
        self.names = set()

    def add(self, name, x, full=None):
        if self.only is not None and not name.startswith(self.only):
            return
        if torch.is_tensor(x):
            x = x.detach()
            x = x.float() if x.dtype == torch.bfloat16 else x  # numpy has no bf16
        a = np.asarray(x.numpy() if torch.is_tensor(x) else x, dtype=np.float64)
        a32 = a.astype(np.float32)
        assert len(name) < NAME_LEN and name not in self.names, name
        assert a32.ndim <= 8 and np.all(np.isfinite(a32)), name
        self.names.add(name)
        flat = a32.reshape(-1)
        numel = flat.size
        if full is None:  # a sample needs fewer stored values than the tensor has
            full = numel <= self.full_max or numel <= self.samples
        if full:
            stored = flat
        else:
            idx = (np.arange(self.samples, dtype=np.int64) * numel) // self.samples
            stored = flat[idx]
        f64 = flat.astype(np.float64)
        stats = (math.sqrt(float(np.sum(f64 * f64))), float(np.sum(np.abs(f64))),
                 float(np.sum(f64)), float(np.max(np.abs(f64))) if numel else 0.0)
        shape = list(a32.shape) + [0] * (8 - a32.ndim)
        head = name.encode("ascii").ljust(NAME_LEN, b"\0")
        head += struct.pack("<II8IQQ4d", 0 if full else 1, a32.ndim, *shape, numel, stored.size,
                            *stats)
        assert len(head) == 184
        self.entries.append(head + stored.astype("<f4").tobytes())

    def write(self, path):
        body = b"".join(self.entries)
        size = 32 + len(body)
        data = MAGIC + struct.pack("<IIIQ", VERSION, len(self.entries), 0, size) + body
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if path.endswith(".zst"):
            # zstd's CLI (a build dependency): half the bytes in the working tree that every
            # GPU call carries; its frame states the size and a checksum, which the reader uses
            subprocess.run(["zstd", "-19", "-q", "-f", "--check", "-o", path], input=data,
                           check=True)
        else:
            with open(path, "wb") as f:
                f.write(data)
        return size


def interp(x, xp, fp):
    return float(np.interp(x, xp, fp))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float64", "float32", "bf16"), default="float64")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    amp = args.dtype == "bf16"
    if args.out is None:
        args.out = OUT_BF16 if amp else OUT
    dt = torch.float32 if amp else getattr(torch, args.dtype)
    mf = torch.channels_last if amp else torch.contiguous_format
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    model = Model(CFG)
    det = model.model[-1]
    with torch.no_grad():
        ys = model(torch.zeros(1, 3, IMG, IMG))
    strides = [IMG // o.shape[2] for o in ys[-1]]
    assert strides == [8, 16, 32], strides
    init_weights(model, WEIGHT_SEED, strides)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    model = model.to(dt).to(memory_format=mf)
    model.train()
    params = list(model.named_parameters())
    nc = det.nc
    anchors32 = init["model.24.anchors"].float()

    x = torch.from_numpy(init_uniform(INPUT_SEED, INPUT_K, BS * 3 * IMG * IMG)).view(
        BS, 3, IMG, IMG)
    targets = torch.tensor(TARGETS, dtype=torch.float32)
    nl = det.nl
    gains = (HYP["box"] * 3 / nl, HYP["obj"] * (IMG / 640) ** 2 * 3 / nl,
             HYP["cls"] * nc / 80 * 3 / nl)
    balance = (4.0, 1.0, 0.4)

    # optimizer: smart_optimizer's groups, in model.modules() order
    g_bias, g_w, g_bn = [], [], []
    for mod in model.modules():
        for pn, prm in mod.named_parameters(recurse=False):
            if pn == "bias":
                g_bias.append(prm)
            elif pn == "weight" and isinstance(mod, nn.BatchNorm2d):
                g_bn.append(prm)
            else:
                g_w.append(prm)
    accumulate = max(round(64 / BS), 1)
    wd = HYP["weight_decay"] * BS * accumulate / 64
    opt = torch.optim.SGD(g_bias, lr=HYP["lr0"], momentum=HYP["momentum"], nesterov=True)
    opt.add_param_group({"params": g_w, "weight_decay": wd})
    opt.add_param_group({"params": g_bn, "weight_decay": 0.0})
    for grp in opt.param_groups:
        grp["initial_lr"] = HYP["lr0"]
    nw = max(round(HYP["warmup_epochs"] * NB), 100)
    lf0 = (1 - 0 / EPOCHS) * (1.0 - HYP["lrf"]) + HYP["lrf"]

    ema = {k: v.clone().to(dt) for k, v in model.state_dict().items()
           if v.dtype.is_floating_point}
    updates = 0

    # the bf16 dump keeps what test_train_parity reads, at 256 elements a tensor: it travels in
    # the working tree to the GPU machine, whose whole bundle must stay under 40 MiB
    # (docs/gpu-session.md)
    d = Dump(512, 256, ("targets", "step")) if amp else Dump()
    d.add("input", x, full=False)
    d.add("targets", targets)
    d.add("hyp", [*gains, *balance, HYP["anchor_t"], BS])
    for name, _ in params:
        d.add("init." + name, init[name])

    sched = dict(gradnorm=[], clip=[], lr=[], momentum=[], decay=[], loss=[])
    deltas = []
    for ni in range(N_STEPS):
        # warmup (train.py): accumulate stays 1 for these ni, so every iteration steps
        acc_now = max(1, round(interp(ni, [0, nw], [1, 64 / BS])))
        assert acc_now == 1
        for j, grp in enumerate(opt.param_groups):
            grp["lr"] = interp(ni, [0, nw], [HYP["warmup_bias_lr"] if j == 0 else 0.0,
                                             grp["initial_lr"] * lf0])
            grp["momentum"] = interp(ni, [0, nw], [HYP["warmup_momentum"], HYP["momentum"]])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            ys = model(x.to(dt).contiguous(memory_format=mf))
        p = [pi.float() for pi in ys[-1]] if amp else ys[-1]
        for pi in p:
            pi.retain_grad()
        bt = build_targets([pi.shape for pi in p], targets, anchors32, HYP["anchor_t"])
        total, (lbox, lobj, lcls), levels = compute_loss(p, bt, gains, balance, nc)
        opt.zero_grad(set_to_none=False)
        total.backward()
        if ni == 0:
            for i, yi in enumerate(ys[:-1]):
                d.add(f"layer.{i}", yi)
            for i, pi in enumerate(p):
                d.add(f"detect.{i}", pi, full=True)
            for i, e in enumerate(bt):
                for key in ("b", "a", "gj", "gi", "tcls", "tbox", "anch"):
                    d.add(f"bt.{i}.{key}", e[key].float(), full=True)
                lv = levels[i]
                d.add(f"loss.{i}.iou", lv["iou"], full=True)
                d.add(f"loss.{i}.tobj", lv["tobj"], full=True)
                for key in ("lbox", "lobj", "lcls"):
                    d.add(f"loss.{i}.{key}", lv[key], full=True)
            d.add("loss.lbox", lbox, full=True)
            d.add("loss.lobj", lobj, full=True)
            d.add("loss.lcls", lcls, full=True)
            d.add("loss.items", [float(lbox) * gains[0], float(lobj) * gains[1],
                                 float(lcls) * gains[2]], full=True)
            d.add("loss.total", total, full=True)
            for i, pi in enumerate(p):
                d.add(f"dloss.detect.{i}", pi.grad, full=True)
            for name, prm in params:
                d.add("grad." + name, prm.grad)  # before clipping
            print(f"loss: lbox {float(lbox):.6f} lobj {float(lobj):.6f} lcls {float(lcls):.6f}"
                  f" total {float(total):.6f}; entries per level "
                  f"{[int(e['b'].shape[0]) for e in bt]}")
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        coef = min(10.0 / (float(gn) + 1e-6), 1.0)
        sched["gradnorm"].append(float(gn))
        sched["clip"].append(coef)
        sched["lr"].append([grp["lr"] for grp in opt.param_groups])
        sched["momentum"].append(opt.param_groups[0]["momentum"])
        sched["loss"].append([float(lbox), float(lobj), float(lcls), float(total)])
        opt.step()
        updates += 1
        dec = 0.9999 * (1 - math.exp(-updates / 2000))
        sched["decay"].append(dec)
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in ema.items():
                v.mul_(dec).add_((1 - dec) * msd[k].detach())
        deltas.append({name: (prm.detach() - init[name].to(dt)).clone() for name, prm in params})
        print(f"step {ni + 1}: loss {sched['loss'][-1]} grad norm {float(gn):.6f} clip "
              f"{coef:.6f} lr {sched['lr'][-1]} momentum {sched['momentum'][-1]:.6f}")

    d.add("step.gradnorm", sched["gradnorm"], full=True)
    d.add("step.clip_coef", sched["clip"], full=True)
    d.add("step.lr", sched["lr"], full=True)
    d.add("step.momentum", sched["momentum"], full=True)
    d.add("step.ema_decay", sched["decay"], full=True)
    d.add("step.loss", sched["loss"], full=True)
    for s, dl in enumerate(deltas):
        for name, _ in params:
            d.add(f"step{s + 1}.delta.{name}", dl[name])
    for name, prm in params:
        d.add("step3.param." + name, prm)
    for name, _ in params:
        d.add("step3.ema." + name, ema[name])
        d.add("step3.ema_delta." + name, ema[name] - init[name].to(dt))
    msd = model.state_dict()
    for k in msd:
        if k.endswith("running_mean") or k.endswith("running_var"):
            d.add("step3.buffer." + k, msd[k])
            d.add("step3.ema." + k, ema[k])
    nbt = {int(v) for k, v in msd.items() if k.endswith("num_batches_tracked")}
    assert nbt == {N_STEPS}, nbt
    d.add("step3.num_batches_tracked", float(N_STEPS), full=True)
    size = d.write(args.out)
    print(f"wrote {args.out}: {len(d.entries)} entries, {size} bytes ({args.dtype}); "
          f"{len(params)} parameter tensors, {sum(p.numel() for _, p in params)} parameters")


if __name__ == "__main__":
    sys.exit(main())
