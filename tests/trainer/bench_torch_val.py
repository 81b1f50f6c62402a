#!/usr/bin/python3
"""PyTorch side of scripts/bench-cpu: validation inference and NMS as val.py runs them on the CPU.

Baselines for build/tests/trainer/test_net_bench (MODE infer) and build/tests/trainer/bench_nms,
on Debian's python3-torch and python3-torchvision, with the PyTorch YOLOv5 of make_parity_ref.py
and val.py's pieces as make_val_refs.py restates them (Conv + BN fused as attempt_load(fuse=True)
does, Detect's decode, non_max_suppression with torchvision's nms).

  bench_torch_val.py infer IMG BATCH THREADS ITERS [MODEL_YAML]
      eval forward + decode of a fused, randomly initialised model under torch.no_grad(), best of
      ITERS after one warm-up: "infer X ms per batch, Y ms per image".
  bench_torch_val.py dump SHARED_DIR OUT [IMG [N]]
      the decoded predictions of yolov5n.pt on the first N (32) coco128 images, each letterboxed
      to val.py's rect shape for a batch of one at IMG (640), written to OUT in bench_nms.c's
      format (about 7 MB per image at 640).
  bench_torch_val.py nms DUMP THREADS ITERS [IOU]
      non_max_suppression (conf 0.001, multi-label, max_det 300) per image of DUMP, best pass of
      ITERS after one warm-up: "nms X ms per image over N images, K detections".
"""
import math
import os
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_parity_ref as ref  # noqa: E402
import make_val_refs as val  # noqa: E402

STRIDES = [8.0, 16.0, 32.0]


def infer(a):
    img, bs, threads, iters = int(a[0]), int(a[1]), int(a[2]), int(a[3])
    yaml = a[4] if len(a) > 4 else os.path.join(HERE, "..", "..", "models", "yolov5n.yaml")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = val.fuse(ref.Model(yaml).eval())
    det = model.model[-1]
    x = torch.rand(bs, 3, img, img)
    best = math.inf
    with torch.no_grad():
        for it in range(iters + 1):  # iteration 0 warms up
            t0 = time.perf_counter()
            val.decode(model(x)[-1], det.anchors, STRIDES)
            t1 = time.perf_counter()
            if it:
                best = min(best, t1 - t0)
    print(f"torch {torch.__version__} img {img} batch {bs} threads {threads}: infer "
          f"{best * 1e3:.1f} ms per batch, {best * 1e3 / bs:.3f} ms per image (best of {iters})")


def dump(a):
    shared, out = a[0], a[1]
    img = int(a[2]) if len(a) > 2 else 640
    n = int(a[3]) if len(a) > 3 else 32
    sd, _ = val.load_pt(os.path.join(shared, "weights", "yolov5n.pt"))
    model = ref.Model(os.path.join(HERE, "..", "..", "models", "yolov5n.yaml"))
    model.load_state_dict(sd, strict=True)
    model = val.fuse(model.eval())
    det = model.model[-1]
    img_dir = os.path.join(shared, "datasets", "coco128", "images", "train2017")
    files = sorted(os.path.join(img_dir, f) for f in os.listdir(img_dir) if f.endswith(".jpg"))[:n]
    with open(out, "wb") as f:
        f.write(b"NMSP" + struct.pack("<ii", len(files), det.no))
        for p in files:
            im, _, (h, w) = val.load_image(p, img)
            # val.py's batch shape for a batch of this one image (stride 32, pad 0.5)
            r = [h / w, 1] if h < w else [1, w / h]
            shape = (np.ceil(np.array(r) * img / 32 + 0.5).astype(int) * 32).tolist()
            im, _, _ = val.letterbox(im, shape)
            x = torch.from_numpy(np.ascontiguousarray(im[:, :, ::-1].transpose(2, 0, 1)))
            with torch.no_grad():
                pred = val.decode(model(x[None].float() / 255)[-1], det.anchors, STRIDES)[0]
            f.write(struct.pack("<i", pred.shape[0]))
            f.write(pred.contiguous().numpy().astype("<f4").tobytes())
    print(f"wrote {out}: {len(files)} images at {img}")


def nms(a):
    path, threads, iters = a[0], int(a[1]), int(a[2])
    iou = float(a[3]) if len(a) > 3 else 0.6
    torch.set_num_threads(threads)
    preds = []
    with open(path, "rb") as f:
        magic, n, width = f.read(4), *struct.unpack("<ii", f.read(8))
        assert magic == b"NMSP", f"{path}: not a dump"
        for _ in range(n):
            (rows,) = struct.unpack("<i", f.read(4))
            buf = np.frombuffer(f.read(rows * width * 4), dtype="<f4").reshape(1, rows, width)
            preds.append(torch.from_numpy(buf.copy()))
    best, total = math.inf, 0
    for it in range(iters + 1):  # pass 0 warms up
        kept = 0
        t0 = time.perf_counter()
        for p in preds:
            kept += val.nms(p, 0.001, iou)[0].shape[0]
        t1 = time.perf_counter()
        if it:
            best = min(best, t1 - t0)
        total = kept
    print(f"nms {best * 1e3 / len(preds):.3f} ms per image over {len(preds)} images, {total} "
          f"detections, iou {iou:g} (best of {iters})")


if __name__ == "__main__":
    modes = {"infer": infer, "dump": dump, "nms": nms}
    if len(sys.argv) < 2 or sys.argv[1] not in modes:
        sys.exit(__doc__)
    modes[sys.argv[1]](sys.argv[2:])
