#!/usr/bin/python3
"""train.py's epoch loop on the CPU, restated, for scripts/bench-epoch: what an ultralytics user
waits for per epoch, loader and step together, on the same cores.

The loader is bench_ultra_loader.py's (ultralytics v7.0's load_mosaic -> random_perspective ->
augment_hsv -> fliplr in Python + OpenCV, cv2.imread from the files at every sample, a torch
DataLoader with --workers processes, as train.py's nw = min(cpu_count, batch, 8)); the step is
bench_torch_step.py's (the model from the yaml, uint8 images / 255, the YOLOv5 loss,
backward, clip_grad_norm_(10), SGD nesterov with ultralytics' three groups, the ModelEMA update),
fp32, torch.set_num_threads(--threads). No validation, no checkpoints (train.py --noval --nosave
times its epochs the same way: the bar's rate is the loop's).

Usage: bench_torch_train.py DATASET_DIR --cfg models/yolov5n.yaml [--img 320] [--batch 16]
[--workers 2] [--threads 2] [--epochs 3] [--device cpu|cuda] [--amp bf16|off]
[--deterministic] [--json]. DATASET_DIR has images/train2017 and labels/train2017 (YOLO
layout). Prints the img/s of each epoch after the first (the first starts the workers and warms
PyTorch's kernels) and their median.

On CUDA (scripts/gpu-check's epoch-gpu): the model channels-last, the forward under bf16
autocast (--amp off: fp32), the batches through pinned memory (train.py's PIN_MEMORY), the
targets built on the host and moved, as bench_torch_step.py; --deterministic is train.py's
init_seeds(deterministic=True) (cuDNN's deterministic algorithms, no benchmark).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ultra_loader import Mosaics  # noqa: E402
from bench_torch_step import EMA, loss_fn, sgd  # noqa: E402
from make_parity_ref import Model, build_targets  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--img", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", choices=["bf16", "off"], default="bf16")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if a.deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if a.epochs < 2:
        sys.exit("bench_torch_train: --epochs 2 or more (the first is not timed)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    ds = Mosaics(a.root, a.img, False)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                    collate_fn=Mosaics.collate, persistent_workers=a.workers > 0,
                    pin_memory=cuda)
    model = Model(a.cfg).to(dev).train()
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    amp = cuda and a.amp == "bf16"
    det = model.model[-1]
    nc = det.nc if hasattr(det, "nc") else 80
    opt = sgd(model)
    ema = EMA(model)
    strides = [8, 16, 32]
    anchors = det.anchors.detach().float().cpu() / torch.tensor(strides, dtype=torch.float32
                                                                 ).view(3, 1, 1)
    rates = []
    for epoch in range(a.epochs):
        t0, n = time.perf_counter(), 0
        for ims, tg in dl:
            x = ims.to(dev, non_blocking=True).float() / 255
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
                out = model(x)[-1]
            shapes = [(x.shape[0], 3, a.img // s, a.img // s, nc + 5) for s in strides]
            bt = build_targets(shapes, tg, anchors, 4.0)
            if cuda:
                bt = [{k: v.to(dev, non_blocking=True) for k, v in e.items()} for e in bt]
            loss = loss_fn([o.float() for o in out], bt, nc)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            ema.update(model)
            n += x.shape[0]
        if cuda:
            torch.cuda.synchronize()
        if epoch:
            rates.append(n / (time.perf_counter() - t0))
    res = {"img_per_s": statistics.median(rates), "epochs": rates, "workers": a.workers,
           "threads": a.threads, "img": a.img, "batch": a.batch, "torch": torch.__version__,
           "device": str(dev), "amp": "bf16" if amp else "off",
           "deterministic": a.deterministic}
    print(json.dumps(res) if a.json else
          f"{res['img_per_s']:.1f} img/s (epochs {', '.join(f'{r:.1f}' for r in rates)}; "
          f"{a.workers} workers, {a.threads} threads)")


if __name__ == "__main__":
    main()
