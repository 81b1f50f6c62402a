#!/usr/bin/python3
"""yolo-export checked with Debian's python3-onnx and python3-torch (run by meson, exit-code
protocol: 0 pass, 1 fail, 77 skip).

    test_export.py YOLO_EXPORT TEST_EXPORT_REF MODELS_DIR SHARED_DIR

test_export_ref (tests/trainer/test_export_ref.c) writes the model (yolov5n.pt from SHARED_DIR
when present, else yolov5n.yaml with seeded BatchNorm statistics) as a plain state dict, our
input tensors (a coco128 image letterboxed when SHARED_DIR has one, else a synthetic picture) and
our forward pass (trn_net_infer) on them; it also runs trn_nms_run on request. Then:
  onnx   yolo-export --include onnx (static, --dynamic, --half, --nms, --opset 12): the checker
         with full_check, strict shape inference giving the declared output shape, and the graph
         run by the small evaluator below (python3-onnx 1.12 has no ReferenceEvaluator) on our
         input: output0 against our forward pass, |a - b| <= 1e-4 * max(|b|, 1) in fp32; the
         dynamic graph at a second size and batch 2; fp16 within fp16's error; NMS detections
         against trn_nms_run on the graph's own output0.
  ort    the same graphs under onnxruntime when it is installed (CUDA with TF32 off when there is
         a GPU): output0 against our forward pass, NMS against trn_nms_run.
  pt     yolo-export --include pt: torch.load(weights_only=True), load_state_dict(strict=True)
         into the PyTorch YOLOv5 of make_parity_ref.py, and its forward + Detect decode against
         ours (same tolerance).
The evaluator runs each node with torch.nn.functional / torch ops; fp16 graphs are run in fp32
with every floating result rounded to fp16 (what fp16 storage with fp32 accumulation gives).
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torch.nn.functional as F
except ImportError as e:  # a machine without Debian's python3-onnx / python3-torch
    print(f"1..0 # SKIP {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import make_parity_ref as ref  # the PyTorch YOLOv5 with ultralytics' module names
except ImportError as e:
    print(f"1..0 # SKIP make_parity_ref: {e}")
    sys.exit(77)

MAGIC = 0x52455846
failed = 0
count = 0


def check(cond, what):
    global failed, count
    count += 1
    print(f"{'ok' if cond else 'not ok'} {count} - {what}", flush=True)
    if not cond:
        failed += 1
    return cond


def rel_err(a, b):
    """Worst error of a against b, relative to max(|b|, 1) for boxes (pixels) and to
    max(min(b, 1 - b), 0.01) for the probabilities (columns 4 on of (.., no) rows)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not b.size:
        return 0.0
    if b.ndim == 3:
        eb = np.abs(a[..., :4] - b[..., :4]) / np.maximum(np.abs(b[..., :4]), 1.0)
        s = b[..., 4:]
        es = np.abs(a[..., 4:] - s) / np.maximum(np.minimum(s, 1 - s), 0.01)
        return float(max(eb.max(), es.max()))
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0)))


# ---------------------------------------------------------------------------------------------
# the evaluator

DT = {1: torch.float32, 10: torch.float16, 7: torch.int64, 9: torch.bool, 6: torch.int32}


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def nms_onnx(boxes, scores, max_out, iou_thr, score_thr):
    """NonMaxSuppression as the ONNX spec states it (center_point_box 0): per image and class,
    boxes by descending score, those below score_thr removed, each suppressing later ones with
    IoU > iou_thr."""
    out = []
    for b in range(boxes.shape[0]):
        bx = boxes[b].double()
        area = (bx[:, 2] - bx[:, 0]).clamp(min=0) * (bx[:, 3] - bx[:, 1]).clamp(min=0)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = torch.nonzero(s >= score_thr).flatten()
            cand = cand[torch.argsort(-s[cand], stable=True)]
            keep = []
            for i in cand.tolist():
                if len(keep) >= max_out:
                    break
                ok = True
                for j in keep:
                    lt = torch.maximum(bx[i, :2], bx[j, :2])
                    rb = torch.minimum(bx[i, 2:], bx[j, 2:])
                    inter = (rb - lt).clamp(min=0).prod()
                    union = area[i] + area[j] - inter
                    if union > 0 and inter / union > iou_thr:
                        ok = False
                        break
                if ok:
                    keep.append(i)
            out += [[b, c, i] for i in keep]
    return torch.tensor(out, dtype=torch.int64).reshape(-1, 3)


def run_graph(model, feeds):
    g = model.graph
    half = any(i.type.tensor_type.elem_type == 10 for i in g.input)
    env = {}
    for t in g.initializer:
        v = torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
        env[t.name] = v.float() if v.dtype == torch.float16 else v
    for k, v in feeds.items():
        env[k] = torch.from_numpy(v).float()
    for n in g.node:
        x = [env[i] if i else None for i in n.input]
        a = attrs(n)
        op = n.op_type
        if op == "Conv":
            p = a.get("pads", [0, 0, 0, 0])
            assert p[0] == p[2] and p[1] == p[3] and a.get("group", 1) == 1
            y = F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", [1, 1]),
                         p[:2], a.get("dilations", [1, 1]))
        elif op == "Sigmoid":
            y = torch.sigmoid(x[0])
        elif op in ("Mul", "Add", "Sub", "Div"):
            if op == "Div" and not x[0].is_floating_point():
                y = torch.div(x[0], x[1], rounding_mode="trunc")
            else:
                y = {"Mul": torch.mul, "Add": torch.add, "Sub": torch.sub, "Div": torch.div}[op](
                    x[0], x[1])
        elif op == "Concat":
            y = torch.cat(x, a["axis"])
        elif op == "MaxPool":
            p = a["pads"]
            assert p[0] == p[2] and p[1] == p[3]
            y = F.max_pool2d(x[0], a["kernel_shape"], a["strides"], p[:2])
        elif op == "Resize":
            assert a["mode"] == b"nearest" and a["coordinate_transformation_mode"] == b"asymmetric"
            assert a["nearest_mode"] == b"floor"
            sc = x[2].tolist()
            assert sc[0] == 1 and sc[1] == 1
            y = F.interpolate(x[0], scale_factor=(sc[2], sc[3]), mode="nearest")
        elif op == "Reshape":
            shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(x[1].tolist())]
            y = x[0].reshape(shape)
        elif op == "Transpose":
            y = x[0].permute(*a["perm"]).contiguous()
        elif op == "Slice":
            y = x[0]
            for s, e, ax in zip(x[1].tolist(), x[2].tolist(), x[3].tolist()):
                y = y.narrow(ax, s, min(e, y.shape[ax]) - s)
        elif op == "Shape":
            y = torch.tensor(x[0].shape, dtype=torch.int64)
        elif op == "Gather":
            y = torch.index_select(x[0], a.get("axis", 0), x[1].reshape(-1)).reshape(
                x[1].shape)
        elif op == "ReduceProd":
            y = torch.prod(x[0]) if not a.get("keepdims", 1) else None
        elif op == "ReduceMax":
            y = torch.amax(x[0], dim=a["axes"], keepdim=bool(a.get("keepdims", 1)))
        elif op == "Range":
            y = torch.arange(int(x[0]), int(x[1]), int(x[2]), dtype=torch.int64)
        elif op == "Cast":
            to = a["to"]
            y = x[0].float() if to in (1, 10) else x[0].to(DT[to])
            if to == 10:
                y = y.half().float()
        elif op == "Equal":
            y = torch.eq(x[0], x[1])
        elif op == "NonMaxSuppression":
            y = nms_onnx(x[0], x[1], int(x[2]), float(x[3]), float(x[4]))
        elif op == "GatherND":
            idx = x[1]
            y = x[0][tuple(idx[:, k] for k in range(idx.shape[1]))]
        else:
            raise SystemExit(f"evaluator: op {op} not implemented")
        if half and y.is_floating_point():
            y = y.half().float()
        env[n.output[0]] = y
    return [env[o.name] for o in g.output]


# ---------------------------------------------------------------------------------------------
# our side


def read_ref(path):
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:32], dtype=np.int32)
    assert hdr[0] == MAGIC, path
    h, w, rows, no = (int(v) for v in hdr[1:5])
    conf = float(np.frombuffer(raw[24:28], dtype=np.float32)[0])
    f = np.frombuffer(raw[32:], dtype=np.float32)
    n_in = 3 * h * w
    x = f[:n_in].reshape(1, 3, h, w)
    out = f[n_in:n_in + rows * no].reshape(1, rows, no)
    return x.copy(), out, conf


def match_dets(ours, theirs):
    """ours (n, 6) x1 y1 x2 y2 conf cls and theirs (n, 6) in any order are the same detections:
    each of ours pairs with a distinct one of theirs of its class, boxes within 1e-4 relative
    (of max(|v|, 1) pixels) and confidences within 1e-4 relative. Near-equal confidences may
    come in another order, so rows are paired by box, not by sort position."""
    used = set()
    for r in ours:
        best, err = None, None
        for j, t in enumerate(theirs):
            if j in used or t[5] != r[5]:
                continue
            e = float(np.max(np.abs(t[:4] - r[:4]) / np.maximum(np.abs(r[:4]), 1.0)))
            if err is None or e < err:
                best, err = j, e
        if best is None or err > 1e-4 or abs(theirs[best][4] - r[4]) > 1e-4 * r[4]:
            print(f"# unmatched: {r.tolist()}")
            return False
        used.add(best)
    return True


def c_nms(helper, tmp, pred, conf):
    """trn_nms_run (best class, IoU 0.45, conf > conf) on one image's (rows, no) predictions."""
    src, dst = os.path.join(tmp, "pred.bin"), os.path.join(tmp, "dets.bin")
    with open(src, "wb") as f:
        f.write(np.array(pred.shape, dtype=np.int32).tobytes())
        f.write(np.ascontiguousarray(pred, dtype=np.float32).tobytes())
    if run([helper, "--nms", src, repr(conf), dst]).returncode != 0:
        return None
    raw = open(dst, "rb").read()
    n = int(np.frombuffer(raw[:4], dtype=np.int32)[0])
    return np.frombuffer(raw[4:], dtype=np.float32).reshape(n, 6)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print("# " + " ".join(cmd) + "\n# " + r.stderr.replace("\n", "\n# "))
    return r


def decode_torch(raw, anchors, strides):
    """ultralytics' Detect decode (export mode) on the raw (bs, na, ny, nx, no) outputs."""
    z = []
    for i, x in enumerate(raw):
        bs, na, ny, nx, no = x.shape
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float() - 0.5
        ag = (anchors[i] * strides[i]).view(1, na, 1, 1, 2)
        y = x.sigmoid()
        xy = (y[..., :2] * 2 + grid) * strides[i]
        wh = (y[..., 2:4] * 2) ** 2 * ag
        z.append(torch.cat((xy, wh, y[..., 4:]), 4).view(bs, -1, no))
    return torch.cat(z, 1)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    exporter, helper, models, shared = sys.argv[1:]
    cfg = os.path.join(models, "yolov5n.yaml")
    pt = os.path.join(shared, "weights", "yolov5n.pt")
    img = os.path.join(shared, "datasets", "coco128", "images", "train2017", "000000000009.jpg")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [helper, models, tmp]
        if os.path.exists(pt):
            cmd += ["--weights", pt]
        if os.path.exists(img):
            cmd += ["--image", img]
        src = "coco128 " + os.path.basename(img) if os.path.exists(img) else "synthetic"
        print(f"# model: {'yolov5n.pt' if os.path.exists(pt) else 'yolov5n.yaml, seeded BN'}; "
              f"input: {src}")
        if run(cmd + ["256", "256", "192", "320"]).returncode != 0:
            print("Bail out! test_export_ref failed")
            return 99
        x, out, conf = read_ref(os.path.join(tmp, "ref_256x256.bin"))
        x2, out2, _ = read_ref(os.path.join(tmp, "ref_192x320.bin"))
        weights = os.path.join(tmp, "model.pt")

        def export(name, *extra):
            path = os.path.join(tmp, name)
            r = run([exporter, "--weights", weights, "--cfg", cfg, "-o", path, *extra])
            check(r.returncode == 0, f"yolo-export {' '.join(extra)}")
            return onnx.load(path) if r.returncode == 0 and name.endswith(".onnx") else path

        def checked(model, what, shape):
            try:
                onnx.checker.check_model(model, full_check=True)
                ok = True
            except Exception as e:  # onnx raises its own ValidationError / InferenceError
                print(f"# {e}")
                ok = False
            check(ok, f"{what}: onnx.checker full_check")
            inf = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param
                    for d in inf.graph.output[0].type.tensor_type.shape.dim]
            check(dims == shape, f"{what}: inferred output0 shape {dims} == {shape}")

        # fp32, static 320
        m = export("static.onnx", "--include", "onnx", "--img", "256")
        checked(m, "static", [1, out.shape[1], out.shape[2]])
        ops = [n.op_type for n in m.graph.node]
        check("BatchNormalization" not in ops and ops.count("Conv") == 60,
              f"static: 60 fused Convs, no BatchNormalization ({ops.count('Conv')} Conv)")
        y = run_graph(m, {"images": x})[0].numpy()
        e = rel_err(y, out)
        check(y.shape == out.shape and e <= 1e-4, f"static: output0 vs our forward, rel {e:.2e}")

        # dynamic: another size, batch 2
        m = export("dynamic.onnx", "--include", "onnx", "--img", "256", "--dynamic")
        checked(m, "dynamic", ["batch", "anchors", out.shape[2]])
        y = run_graph(m, {"images": np.concatenate([x2, x2])})[0].numpy()
        e = max(rel_err(y[0:1], out2), rel_err(y[1:2], out2))
        check(y.shape == (2,) + out2.shape[1:] and e <= 1e-4,
              f"dynamic: 2x3x192x320 output0 vs our forward, rel {e:.2e}")

        # fp16: initializers are fp32's rounded; the output within fp16 error where it matters
        m = export("half.onnx", "--include", "onnx", "--img", "256", "--half")
        checked(m, "half", [1, out.shape[1], out.shape[2]])
        check(m.graph.input[0].type.tensor_type.elem_type == 10 and
              m.graph.output[0].type.tensor_type.elem_type == 10, "half: fp16 input and output")
        ms = onnx.load(os.path.join(tmp, "static.onnx"))
        f32 = {t.name: onnx.numpy_helper.to_array(t) for t in ms.graph.initializer}
        same = all(onnx.numpy_helper.to_array(t).dtype != np.float16 or
                   np.array_equal(onnx.numpy_helper.to_array(t), f32[t.name].astype(np.float16))
                   for t in m.graph.initializer)
        check(same, "half: every fp16 initializer is the fp32 one rounded")
        y = run_graph(m, {"images": x.astype(np.float16)})[0].numpy()
        e16 = rel_err(y, out)
        check(e16 < 0.1, f"half: output0 vs our fp32 forward within fp16 error, rel {e16:.2e}")

        # NMS: the graph's detections against trn_nms_run
        m = export("nms.onnx", "--include", "onnx", "--img", "256", "--nms", "--max-det", "300",
                   "--conf-thres", repr(conf))
        checked(m, "nms", [1, out.shape[1], out.shape[2]])
        check([o.name for o in m.graph.output] == ["output0", "detections"],
              "nms: outputs output0, detections")
        y, d = (v.numpy() for v in run_graph(m, {"images": x}))
        dets = c_nms(helper, tmp, y[0], conf)
        same = (dets is not None and len(dets) == len(d) and np.all(d[:, 0] == 0) and
                match_dets(dets, d[:, 1:]))
        check(same, f"nms: {len(d)} detections == trn_nms_run's on the same output0 "
                    f"({-1 if dets is None else len(dets)}; boxes, confidences, classes)")

        # opset 12
        m = export("opset12.onnx", "--include", "onnx", "--img", "256", "--opset", "12")
        checked(m, "opset 12", [1, out.shape[1], out.shape[2]])
        check(m.opset_import[0].version == 12 and m.ir_version == 7, "opset 12: IR version 7")
        y = run_graph(m, {"images": x})[0].numpy()
        check(rel_err(y, out) <= 1e-4, "opset 12: output0 vs our forward")

        # the state dict in PyTorch
        path = export("state.pt", "--include", "pt")
        sd = torch.load(path, weights_only=True)
        net = ref.Model(cfg)
        keys = list(net.state_dict().keys())
        check(list(sd.keys()) == keys, f"pt: {len(sd)} keys in ultralytics' order")
        check(sd["model.0.bn.num_batches_tracked"].dtype == torch.int64 and
              sd["model.24.anchors"].shape == (3, 3, 2) and
              all(v.dtype == torch.float32 for k, v in sd.items() if "num_batches" not in k),
              "pt: float32 tensors, int64 num_batches_tracked, anchors (3, 3, 2)")
        try:
            net.load_state_dict(sd, strict=True)
            ok = True
        except RuntimeError as e:
            print(f"# {e}")
            ok = False
        check(ok, "pt: load_state_dict(strict=True)")
        net.eval()
        with torch.no_grad():
            raw = net(torch.from_numpy(x.copy()))[-1]
        strides = [x.shape[2] // r.shape[2] for r in raw]
        y = decode_torch(raw, net.model[-1].anchors, strides).numpy()
        e = rel_err(y, out)
        check(e <= 1e-4, f"pt: PyTorch forward + decode vs ours, rel {e:.2e}")
        halfp = export("state16.pt", "--include", "pt", "--half")
        sd16 = torch.load(halfp, weights_only=True)
        check(all(torch.equal(sd16[k], sd[k].half()) if sd[k].is_floating_point() else
                  torch.equal(sd16[k], sd[k]) for k in keys),
              "pt --half: fp16 tensors, the fp32 ones rounded")
        tiny_net(exporter, helper, models, tmp)
        with_onnxruntime(tmp, helper, x, out, x2, out2, conf)
    print(f"1..{count}")
    return 1 if failed else 0


def with_onnxruntime(tmp, helper, x, out, x2, out2, conf):
    """The same graphs under onnxruntime when it is installed (the lent GPU machines have it;
    Debian does not package it): CUDA (TF32 off) when available, else the CPU."""
    try:
        import onnxruntime as ort
    except ImportError:
        print("# onnxruntime not installed: the onnxruntime comparison is skipped")
        return
    avail = ort.get_available_providers()
    prov = [("CUDAExecutionProvider", {"use_tf32": 0})] if "CUDAExecutionProvider" in avail else []
    prov.append("CPUExecutionProvider")
    name = "CUDA" if len(prov) > 1 else "CPU"
    print(f"# onnxruntime {ort.__version__}, {name}")

    def sess(f):
        try:
            return ort.InferenceSession(os.path.join(tmp, f), providers=prov)
        except Exception:  # an onnxruntime without the use_tf32 option
            return ort.InferenceSession(os.path.join(tmp, f), providers=[
                p if isinstance(p, str) else p[0] for p in prov])

    y = sess("static.onnx").run(None, {"images": x})[0]
    e = rel_err(y, out)
    check(e <= 1e-4, f"onnxruntime {name}: static output0 vs our forward, rel {e:.2e}")
    y = sess("dynamic.onnx").run(None, {"images": np.concatenate([x2, x2])})[0]
    e = max(rel_err(y[0:1], out2), rel_err(y[1:2], out2))
    check(y.shape[0] == 2 and e <= 1e-4,
          f"onnxruntime {name}: dynamic 2x3x192x320 output0 vs our forward, rel {e:.2e}")
    y = sess("half.onnx").run(None, {"images": x.astype(np.float16)})[0]
    e = rel_err(y.astype(np.float32), out)
    check(y.dtype == np.float16 and e < 0.1, f"onnxruntime {name}: fp16 output0, rel {e:.2e}")
    y, d = sess("nms.onnx").run(None, {"images": x})
    dets = c_nms(helper, tmp, y[0], conf)
    check(dets is not None and len(dets) == len(d) and match_dets(dets, d[:, 1:]),
          f"onnxruntime {name}: {len(d)} NMS detections == trn_nms_run's on its output0")


def tiny_net(exporter, helper, models, tmp):
    """The module kinds yolov5n lacks (a standalone Bottleneck, Conv with two copies, C3 without
    shortcut, two Detect levels, nc 2): tests/trainer/models_test/tiny_net.yaml, seeded BN."""
    cfg = os.path.join(HERE, "models_test", "tiny_net.yaml")
    d = os.path.join(tmp, "tiny")
    os.mkdir(d)
    if run([helper, models, d, "--cfg", cfg, "64", "64", "48", "80"]).returncode != 0:
        check(False, "tiny_net: test_export_ref")
        return
    x, out, _ = read_ref(os.path.join(d, "ref_64x64.bin"))
    x2, out2, _ = read_ref(os.path.join(d, "ref_48x80.bin"))
    for extra in ([], ["--dynamic"]):
        path = os.path.join(d, "tiny.onnx")
        r = run([exporter, "--weights", os.path.join(d, "model.pt"), "--cfg", cfg, "-o", path,
                 "--include", "onnx", "--img", "64", *extra])
        if not check(r.returncode == 0, f"tiny_net: yolo-export {' '.join(extra)}"):
            continue
        m = onnx.load(path)
        onnx.checker.check_model(m, full_check=True)
        xi, want = (x2, out2) if extra else (x, out)
        y = run_graph(m, {"images": xi})[0].numpy()
        e = rel_err(y, want)
        check(y.shape == want.shape and e <= 1e-4,
              f"tiny_net{' dynamic 48x80' if extra else ''}: output0 vs our forward, rel {e:.2e}")


if __name__ == "__main__":
    sys.exit(main())
