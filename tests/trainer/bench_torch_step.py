#!/usr/bin/python3
"""PyTorch's training step on the same model, image size and batch as `yolo-train --bench`, for
the side-by-side ratio of scripts/bench-train. The baseline issue 8 names: eager mode, AMP
(bf16 autocast by default, fp16 with a GradScaler as ultralytics does) and channels-last.

One step = forward, the YOLOv5 loss (build_targets, CIoU, objectness and class BCE, vectorised
as ultralytics' ComputeLoss is), backward, clip_grad_norm_(10), SGD (nesterov, momentum 0.937,
weight decay 5e-4 on weights only, as smart_optimizer's groups) and the ModelEMA update. Images
are uniform noise and the targets a fixed random set of boxes per image, as in our bench.

    bench_torch_step.py --cfg models/yolov5s.yaml --img 640 --batch 64 \
        [--device cuda|cpu] [--amp bf16|fp16|off] [--no-channels-last] [--warmup 3] [--steps 10]
        [--boxes 8] [--deterministic | --cudnn-benchmark] [--json]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity_ref import Model, build_targets, ciou  # noqa: E402  (the model from the yaml)


def loss_fn(p, bt, nc, gains=(0.05, 1.0, 0.5), balance=(4.0, 1.0, 0.4)):
    bce = nn.BCEWithLogitsLoss()
    dev = p[0].device
    lbox = torch.zeros((), device=dev)
    lobj = torch.zeros((), device=dev)
    lcls = torch.zeros((), device=dev)
    for i, pi in enumerate(p):
        e = bt[i]
        b, a, gj, gi = e["b"], e["a"], e["gj"], e["gi"]
        tobj = torch.zeros(pi.shape[:4], device=dev, dtype=pi.dtype)
        if b.shape[0]:
            ps = pi[b, a, gj, gi].float()
            pxy = ps[:, 0:2].sigmoid() * 2 - 0.5
            pwh = (ps[:, 2:4].sigmoid() * 2) ** 2 * e["anch"]
            iou = ciou(torch.cat((pxy, pwh), 1), e["tbox"])
            lbox = lbox + (1.0 - iou).mean()
            tobj[b, a, gj, gi] = iou.detach().clamp(0).to(tobj.dtype)
            t = torch.zeros_like(ps[:, 5:])
            t[range(b.shape[0]), e["tcls"]] = 1.0
            lcls = lcls + bce(ps[:, 5:], t)
        lobj = lobj + bce(pi[..., 4].float(), tobj.float()) * balance[i]
    return (lbox * gains[0] + lobj * gains[1] + lcls * gains[2]) * p[0].shape[0]


class EMA:
    def __init__(self, model):
        self.ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.updates = 0

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = 0.9999 * (1 - math.exp(-self.updates / 2000))
        msd = model.state_dict()
        floats = [k for k, v in self.ema.items() if v.dtype.is_floating_point]
        torch._foreach_mul_([self.ema[k] for k in floats], d)
        torch._foreach_add_([self.ema[k] for k in floats], [msd[k].detach() for k in floats],
                            alpha=1 - d)


def sgd(model):
    """smart_optimizer's SGD: nesterov, momentum 0.937; weight decay 5e-4 on the weights only
    (BN weights and biases in groups of their own without it)."""
    g_bn, g_w, g_b = [], [], []
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            if name == "bias":
                g_b.append(p)
            elif isinstance(mod, nn.BatchNorm2d):
                g_bn.append(p)
            else:
                g_w.append(p)
    opt = torch.optim.SGD(g_bn, lr=0.01, momentum=0.937, nesterov=True)
    opt.add_param_group({"params": g_w, "weight_decay": 5e-4})
    opt.add_param_group({"params": g_b, "weight_decay": 0.0})
    return opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--img", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--amp", choices=["bf16", "fp16", "off"], default="bf16")
    ap.add_argument("--no-channels-last", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--boxes", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    # PyTorch lets cuDNN run fp32 convolutions in TF32 by default; ours never do
    # (kernels/cuda/kern_cuda_conv.cu "Math"), so an fp32 (--amp off) comparison turns it off
    # unless --tf32 asks for PyTorch's default. With AMP the convolutions are bf16/fp16 anyway.
    ap.add_argument("--tf32", action="store_true")
    # train.py's init_seeds(deterministic=True): deterministic algorithms only (warn_only, since
    # some backward ops have no deterministic CUDA kernel); ours: yolo-train's default
    ap.add_argument("--deterministic", action="store_true")
    # PyTorch's fastest setting: cuDNN times every algorithm per shape (cudnn.benchmark, what
    # ours does with --cudnn-tune --cudnn-any-algo)
    ap.add_argument("--cudnn-benchmark", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cudnn.allow_tf32 = a.tf32 or a.amp != "off"
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Model(a.cfg).to(dev).train()
    det = model.model[-1]
    nc = det.nc if hasattr(det, "nc") else 80
    cl = not a.no_channels_last and dev.type == "cuda"
    if cl:
        model = model.to(memory_format=torch.channels_last)
    opt = sgd(model)
    ema = EMA(model)
    amp = a.amp != "off" and dev.type == "cuda"
    # autocast's dtype even when it is off: torch 1.13 refuses fp16 for a disabled CPU autocast
    dtype = torch.float16 if amp and a.amp == "fp16" else torch.bfloat16
    # torch.amp.GradScaler is 2.3+; Debian's 1.13 has the CUDA one only.
    Scaler = getattr(torch.amp, "GradScaler", None)
    scaler = (Scaler("cuda", enabled=amp and a.amp == "fp16") if Scaler else
              torch.cuda.amp.GradScaler(enabled=amp and a.amp == "fp16"))

    g = torch.Generator().manual_seed(1)
    x = torch.rand(a.batch, 3, a.img, a.img, generator=g).to(dev)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    nt = a.boxes * a.batch
    wh = 0.02 + 0.4 * torch.rand(nt, 2, generator=g)
    xy = wh / 2 + (1 - wh) * torch.rand(nt, 2, generator=g)
    tg = torch.cat((torch.arange(nt).div(max(a.boxes, 1), rounding_mode="floor")[:, None].float(),
                    torch.randint(0, nc, (nt, 1), generator=g).float(), xy, wh), 1)
    strides = [8, 16, 32]
    # The yaml's anchors are in pixels; ultralytics divides them by the strides (grid units).
    anchors = det.anchors.detach().float().cpu() / torch.tensor(strides, dtype=torch.float32
                                                                 ).view(3, 1, 1)
    no = nc + 5
    shapes = [(a.batch, 3, a.img // s, a.img // s, no) for s in strides]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times = []
    for it in range(a.warmup + a.steps):
        sync()
        if it == a.warmup and dev.type == "cuda":
            # the span `ncu --profile-from-start off` records: the timed steps, as ours
            torch.cuda.cudart().cudaProfilerStart()
        t0 = time.perf_counter()
        with torch.autocast(device_type=dev.type, dtype=dtype, enabled=amp):
            out = model(x)[-1]
        bt = build_targets(shapes, tg, anchors, 4.0)  # on the host, as ultralytics' own
        bt = [{k: v.to(dev, non_blocking=True) for k, v in e.items()} for e in bt]
        loss = loss_fn([o.float() for o in out], bt, nc)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        ema.update(model)
        sync()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        torch.cuda.cudart().cudaProfilerStop()
    ms = 1e3 * sum(times) / len(times)
    res = {"impl": "torch", "torch": torch.__version__, "device": str(dev),
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "",
           "amp": a.amp if amp else "off", "deterministic": a.deterministic,
           "cudnn_benchmark": a.cudnn_benchmark, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
           "channels_last": cl, "img": a.img,
           "batch": a.batch, "ms_step": ms, "img_per_s": a.batch * 1e3 / ms,
           "peak_mem_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0,
           "loss": float(loss)}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {res['torch']} {res['device']} {res['gpu']} amp {res['amp']} "
              f"channels_last {cl}: img {a.img} batch {a.batch}: {ms:.2f} ms/step, "
              f"{res['img_per_s']:.1f} img/s, peak {res['peak_mem_bytes'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
