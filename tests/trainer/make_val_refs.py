#!/usr/bin/python3
"""Write tests/trainer/data_val/coco128_val.txt: what ultralytics' val.py (v7.0) prints for
yolov5n.pt on coco128, class by class, and the CRC-32 of every letterboxed input it feeds the
network, for tests/trainer/test_yolo_val.c.

val.py's pipeline is re-implemented here from its published text, on Debian's python3-torch,
python3-torchvision, python3-opencv and numpy, with the PyTorch YOLOv5 of make_parity_ref.py:
  - the weights: yolov5n.pt unpickled with stand-ins for ultralytics' classes (only their
    state is read), to float32, Conv + BatchNorm fused as attempt_load(fuse=True) does;
  - the data: LoadImagesAndLabels(rect=True, pad=0.5, stride=32, augment=False): images sorted
    by path, labels from labels/*.txt, load_image (cv2.imread, INTER_AREA when shrinking,
    INTER_LINEAR when enlarging, int(w0 * r) x int(h0 * r)), the rect batch shapes from the
    aspect ratios sorted by np.argsort, letterbox(auto=False, scaleup=False);
  - the run: Detect's decode, non_max_suppression(conf 0.001, iou, multi_label, max_det 300)
    with torchvision's nms, scale_boxes, process_batch and ap_per_class (iou 0.5:0.95).
On the CPU val.py runs in float32 (half only on CUDA); batch 32.

    /usr/bin/python3 tests/trainer/make_val_refs.py SHARED_DIR

Output lines: "case IMG IOU", then val.py's rows ("all" first) as
"NAME|IMAGES|INSTANCES|P|R|MAP50|MAP|P9|R9|MAP50_9|MAP_9" with P..MAP printed as val.py does
('%.3g') and then unrounded ('%.9g'), then
"crc IMG INDEX H W CRC32" per image (dataset order) of the letterboxed RGB bytes, and
"txt STEM CLS CX CY W H CONF", val.py --save-txt --save-conf's lines of the first images at 640
/ iou 0.6 (save_one_txt, '%g').
"""
import os
import sys
import types
import zlib

import cv2
import numpy as np
import torch
import torch.nn as nn
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_parity_ref as ref  # noqa: E402

OUT = os.path.join(HERE, "data_val", "coco128_val.txt")
CASES = [(640, 0.6), (320, 0.6), (640, 0.65)]


def load_pt(path):
    """yolov5n.pt's state dict and class names, without ultralytics' code."""
    sys.modules.setdefault("models", types.ModuleType("models"))
    for mod, names in (("models.yolo", ["DetectionModel", "Detect", "Model"]),
                       ("models.common", ["Conv", "C3", "Bottleneck", "SPPF", "Concat"])):
        m = types.ModuleType(mod)
        for n in names:
            setattr(m, n, type(n, (nn.Module,), {}))
        sys.modules[mod] = m
    ck = torch.load(path, map_location="cpu")
    model = ck.get("ema") or ck["model"]
    sd = {k: v.float() for k, v in model.state_dict().items()}
    return sd, list(model.names)


def fuse(model):
    """fuse_conv_and_bn on every Conv (float32, ultralytics' formula)."""
    for m in model.modules():
        if isinstance(m, ref.Conv) and isinstance(m.bn, nn.BatchNorm2d):
            conv, bn = m.conv, m.bn
            f = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                          conv.padding, conv.dilation, conv.groups, bias=True).requires_grad_(False)
            w_conv = conv.weight.clone().view(conv.out_channels, -1)
            w_bn = torch.diag(bn.weight.div(torch.sqrt(bn.eps + bn.running_var)))
            f.weight.copy_(torch.mm(w_bn, w_conv).view(f.weight.shape))
            b_conv = torch.zeros(conv.weight.size(0))
            b_bn = bn.bias - bn.weight.mul(bn.running_mean).div(torch.sqrt(bn.running_var + bn.eps))
            f.bias.copy_(torch.mm(w_bn, b_conv.reshape(-1, 1)).reshape(-1) + b_bn)
            m.conv, m.bn = f, nn.Identity()
    return model


def decode(outs, anchors, strides):
    """Detect's inference path: y = sigmoid; xy = (2y - 0.5 + grid) * stride (grid - 0.5 as
    _make_grid), wh = (2y)^2 * anchor_grid; rows concatenated level by level."""
    z = []
    for i, x in enumerate(outs):
        bs, na, ny, nx, no = x.shape
        yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32),
                                torch.arange(nx, dtype=torch.float32), indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(1, na, ny, nx, 2) - 0.5
        ag = (anchors[i] * strides[i]).view(1, na, 1, 1, 2).expand(1, na, ny, nx, 2)
        y = x.sigmoid()
        xy, wh, conf = y.split((2, 2, no - 4), 4)
        xy = (xy * 2 + grid) * strides[i]
        wh = (wh * 2) ** 2 * ag
        z.append(torch.cat((xy, wh, conf), 4).view(bs, na * nx * ny, no))
    return torch.cat(z, 1)


def xywh2xyxy(x):
    y = x.clone() if isinstance(x, torch.Tensor) else np.copy(x)
    y[..., 0] = x[..., 0] - x[..., 2] / 2
    y[..., 1] = x[..., 1] - x[..., 3] / 2
    y[..., 2] = x[..., 0] + x[..., 2] / 2
    y[..., 3] = x[..., 1] + x[..., 3] / 2
    return y


def nms(prediction, conf_thres, iou_thres, max_det=300):
    bs, nc = prediction.shape[0], prediction.shape[2] - 5
    xc = prediction[..., 4] > conf_thres
    max_wh, max_nms = 7680, 30000
    output = [torch.zeros((0, 6))] * bs
    for xi, x in enumerate(prediction):
        x = x[xc[xi]]
        if not x.shape[0]:
            continue
        x[:, 5:] *= x[:, 4:5]
        box = xywh2xyxy(x[:, :4])
        i, j = (x[:, 5:] > conf_thres).nonzero(as_tuple=False).T  # multi_label (nc > 1)
        x = torch.cat((box[i], x[i, 5 + j, None], j[:, None].float()), 1)
        n = x.shape[0]
        if not n:
            continue
        x = x[x[:, 4].argsort(descending=True)[:max_nms]]
        c = x[:, 5:6] * max_wh
        k = torchvision.ops.nms(x[:, :4] + c, x[:, 4], iou_thres)[:max_det]
        output[xi] = x[k]
    return output


def box_iou(box1, box2, eps=1e-7):
    (a1, a2), (b1, b2) = box1.unsqueeze(1).chunk(2, 2), box2.unsqueeze(0).chunk(2, 2)
    inter = (torch.min(a2, b2) - torch.max(a1, b1)).clamp(0).prod(2)
    return inter / ((a2 - a1).prod(2) + (b2 - b1).prod(2) - inter + eps)


def scale_boxes(img1_shape, boxes, img0_shape, ratio_pad):
    gain, pad = ratio_pad[0][0], ratio_pad[1]
    boxes[:, [0, 2]] -= pad[0]
    boxes[:, [1, 3]] -= pad[1]
    boxes[:, :4] /= gain
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clamp(0, img0_shape[1])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clamp(0, img0_shape[0])
    return boxes


def process_batch(detections, labels, iouv):
    correct = np.zeros((detections.shape[0], iouv.shape[0])).astype(bool)
    iou = box_iou(labels[:, 1:], detections[:, :4])
    correct_class = labels[:, 0:1] == detections[:, 5]
    for i in range(len(iouv)):
        x = torch.where((iou >= iouv[i]) & correct_class)
        if x[0].shape[0]:
            matches = torch.cat((torch.stack(x, 1), iou[x[0], x[1]][:, None]), 1).numpy()
            if x[0].shape[0] > 1:
                matches = matches[matches[:, 2].argsort()[::-1]]
                matches = matches[np.unique(matches[:, 1], return_index=True)[1]]
                matches = matches[np.unique(matches[:, 0], return_index=True)[1]]
            correct[matches[:, 1].astype(int), i] = True
    return torch.tensor(correct, dtype=torch.bool)


def compute_ap(recall, precision):
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([1.0], precision, [0.0]))
    mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
    x = np.linspace(0, 1, 101)
    return np.trapz(np.interp(x, mrec, mpre), x)


def smooth(y, f=0.05):
    nf = round(len(y) * f * 2) // 2 + 1
    p = np.ones(nf // 2)
    yp = np.concatenate((p * y[0], y, p * y[-1]), 0)
    return np.convolve(yp, np.ones(nf) / nf, mode="valid")


def ap_per_class(tp, conf, pred_cls, target_cls, eps=1e-16):
    i = np.argsort(-conf)
    tp, conf, pred_cls = tp[i], conf[i], pred_cls[i]
    unique_classes, nt = np.unique(target_cls, return_counts=True)
    nc = unique_classes.shape[0]
    px = np.linspace(0, 1, 1000)
    ap, p, r = np.zeros((nc, tp.shape[1])), np.zeros((nc, 1000)), np.zeros((nc, 1000))
    for ci, c in enumerate(unique_classes):
        i = pred_cls == c
        n_l, n_p = nt[ci], i.sum()
        if n_p == 0 or n_l == 0:
            continue
        fpc = (1 - tp[i]).cumsum(0)
        tpc = tp[i].cumsum(0)
        recall = tpc / (n_l + eps)
        r[ci] = np.interp(-px, -conf[i], recall[:, 0], left=0)
        precision = tpc / (tpc + fpc)
        p[ci] = np.interp(-px, -conf[i], precision[:, 0], left=1)
        for j in range(tp.shape[1]):
            ap[ci, j] = compute_ap(recall[:, j], precision[:, j])
    f1 = 2 * p * r / (p + r + eps)
    i = smooth(f1.mean(0), 0.1).argmax()
    return p[:, i], r[:, i], ap, unique_classes.astype(int)


def load_image(path, img_size):
    im = cv2.imread(path)
    h0, w0 = im.shape[:2]
    r = img_size / max(h0, w0)
    if r != 1:
        interp = cv2.INTER_LINEAR if r > 1 else cv2.INTER_AREA  # augment=False
        im = cv2.resize(im, (int(w0 * r), int(h0 * r)), interpolation=interp)
    return im, (h0, w0), im.shape[:2]


def letterbox(im, new_shape, color=(114, 114, 114)):
    shape = im.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    r = min(r, 1.0)  # scaleup=False
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = (new_shape[1] - new_unpad[0]) / 2, (new_shape[0] - new_unpad[1]) / 2
    if shape[::-1] != new_unpad:
        im = cv2.resize(im, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    im = cv2.copyMakeBorder(im, top, bottom, left, right, cv2.BORDER_CONSTANT, value=color)
    return im, (r, r), (dw, dh)


def xywh_of(x):
    y = x.clone()
    y[..., 0] = (x[..., 0] + x[..., 2]) / 2
    y[..., 1] = (x[..., 1] + x[..., 3]) / 2
    y[..., 2] = x[..., 2] - x[..., 0]
    y[..., 3] = x[..., 3] - x[..., 1]
    return y


def run_case(model, files, labels, shapes0, img, iou_thres, lines, crcs, txt=None):
    stride, pad, bs = 32, 0.5, 32
    s = np.array(shapes0, dtype=np.float64)  # (w, h) as exif_size gives
    n = len(files)
    bi = np.floor(np.arange(n) / bs).astype(int)
    nb = bi[-1] + 1
    ar = s[:, 1] / s[:, 0]
    irect = ar.argsort()
    files_r = [files[i] for i in irect]
    labels_r = [labels[i] for i in irect]
    ar = ar[irect]
    bshapes = [[1, 1]] * nb
    for i in range(nb):
        ari = ar[bi == i]
        mini, maxi = ari.min(), ari.max()
        if maxi < 1:
            bshapes[i] = [maxi, 1]
        elif mini > 1:
            bshapes[i] = [1, 1 / mini]
    batch_shapes = np.ceil(np.array(bshapes) * img / stride + pad).astype(int) * stride
    iouv = torch.linspace(0.5, 0.95, 10)
    stats, seen = [], 0
    for b in range(nb):
        idx = range(b * bs, min((b + 1) * bs, n))
        ims, tg, shp = [], [], []
        for k, j in enumerate(idx):
            im, (h0, w0), (h, w) = load_image(files_r[j], img)
            im, ratio, padwh = letterbox(im, batch_shapes[b])
            rgb = np.ascontiguousarray(im[:, :, ::-1])
            crcs.append((img, irect[j], rgb.shape[0], rgb.shape[1], zlib.crc32(rgb.tobytes())))
            shp.append(((h0, w0), ((h / h0, w / w0), padwh)))
            lab = labels_r[j].copy()
            if len(lab):
                x = lab[:, 1:].copy()
                lab[:, 1] = ratio[0] * w * (x[:, 0] - x[:, 2] / 2) + padwh[0]
                lab[:, 2] = ratio[1] * h * (x[:, 1] - x[:, 3] / 2) + padwh[1]
                lab[:, 3] = ratio[0] * w * (x[:, 0] + x[:, 2] / 2) + padwh[0]
                lab[:, 4] = ratio[1] * h * (x[:, 1] + x[:, 3] / 2) + padwh[1]
                # xyxy2xywhn(clip=True, eps=1e-3)
                H, W = rgb.shape[:2]
                lab[:, [1, 3]] = lab[:, [1, 3]].clip(0, W - 1e-3)
                lab[:, [2, 4]] = lab[:, [2, 4]].clip(0, H - 1e-3)
                y = lab.copy()
                y[:, 1] = ((lab[:, 1] + lab[:, 3]) / 2) / W
                y[:, 2] = ((lab[:, 2] + lab[:, 4]) / 2) / H
                y[:, 3] = (lab[:, 3] - lab[:, 1]) / W
                y[:, 4] = (lab[:, 4] - lab[:, 2]) / H
                lab = y
            for row in lab:
                tg.append([k, *row])
            ims.append(torch.from_numpy(rgb.transpose(2, 0, 1).copy()))
        x = torch.stack(ims).float() / 255
        H, W = x.shape[2:]
        with torch.no_grad():
            det = model.model[-1]
            outs = model(x)[-1]
            preds = decode(outs, det.anchors, [8.0, 16.0, 32.0])
        targets = torch.tensor(tg, dtype=torch.float32).reshape(-1, 6)
        targets[:, 2:] *= torch.tensor((W, H, W, H))
        out = nms(preds, 0.001, iou_thres)
        for si, pred in enumerate(out):
            lab = targets[targets[:, 0] == si, 1:]
            nl, npr = lab.shape[0], pred.shape[0]
            shape = shp[si][0]
            correct = torch.zeros(npr, 10, dtype=torch.bool)
            seen += 1
            if npr == 0:
                if nl:
                    stats.append((correct, *torch.zeros((2, 0)), lab[:, 0]))
                continue
            predn = pred.clone()
            scale_boxes((H, W), predn[:, :4], shape, shp[si][1])
            if txt is not None and len(txt) < 40:  # save_one_txt(predn, save_conf=True, shape)
                gn = torch.tensor(shape)[[1, 0, 1, 0]]
                stem = os.path.splitext(os.path.basename(files_r[b * bs + si]))[0]
                for *xyxy, conf, cls in predn.tolist():
                    xywh = (xywh_of(torch.tensor(xyxy).view(1, 4)) / gn).view(-1).tolist()
                    line = (cls, *xywh, conf)
                    txt.append("txt %s " % stem + ("%g " * len(line)).rstrip() % line)
            if nl:
                tbox = xywh2xyxy(lab[:, 1:5])
                scale_boxes((H, W), tbox, shape, shp[si][1])
                correct = process_batch(predn, torch.cat((lab[:, 0:1], tbox), 1), iouv)
            stats.append((correct, pred[:, 4], pred[:, 5], lab[:, 0]))
    st = [torch.cat(x, 0).numpy() for x in zip(*stats)]
    p, r, ap, ap_class = ap_per_class(*st)
    ap50, apm = ap[:, 0], ap.mean(1)
    nt = np.bincount(st[3].astype(int), minlength=80)
    lines.append("case %d %g" % (img, iou_thres))
    def row(name, n, v):  # as printed, then unrounded (for the test's rounding-edge rule)
        return "%s|%d|%d|%.3g|%.3g|%.3g|%.3g|%.9g|%.9g|%.9g|%.9g" % (name, seen, n, *v, *v)

    lines.append(row("all", nt.sum(), (p.mean(), r.mean(), ap50.mean(), apm.mean())))
    for i, c in enumerate(ap_class):
        lines.append(row(model.names[c], nt[c], (p[i], r[i], ap50[i], apm[i])))


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared")
    root = os.path.join(shared, "datasets", "coco128")
    sd, names = load_pt(os.path.join(shared, "weights", "yolov5n.pt"))
    model = ref.Model(os.path.join(HERE, "..", "..", "models", "yolov5n.yaml"))
    model.load_state_dict(sd, strict=True)
    model = fuse(model.eval())
    model.names = names
    img_dir = os.path.join(root, "images", "train2017")
    files = sorted(os.path.join(img_dir, f) for f in os.listdir(img_dir)
                   if f.split(".")[-1].lower() in ("jpg", "jpeg", "png", "bmp", "webp"))
    labels, shapes0 = [], []
    for f in files:
        lf = f.replace("/images/", "/labels/").rsplit(".", 1)[0] + ".txt"
        lab = np.zeros((0, 5), np.float32)
        if os.path.exists(lf):
            with open(lf) as fh:
                rows = [x.split() for x in fh.read().strip().splitlines() if len(x)]
            lab = np.array(rows, dtype=np.float32).reshape(-1, 5)
            lab = np.unique(lab, axis=0) if len(np.unique(lab, axis=0)) < len(lab) else lab
        labels.append(lab)
        im = cv2.imread(f)
        shapes0.append((im.shape[1], im.shape[0]))
    lines, crcs, txt = [], [], []
    for img, iou in CASES:
        run_case(model, files, labels, shapes0, img, iou, lines, crcs,
                 txt if (img, iou) == (640, 0.6) else None)
        print("\n".join(l for l in lines if l.startswith("case") or l.startswith("all")))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("# val.py (v7.0) on coco128 with yolov5n.pt, by tests/trainer/make_val_refs.py "
                "(torch %s, torchvision %s, OpenCV %s, numpy %s)\n" % (
                    torch.__version__, torchvision.__version__, cv2.__version__, np.__version__))
        f.write("\n".join(lines) + "\n")
        f.write("\n".join(txt) + "\n")
        seen = set()
        for img, i, h, w, crc in crcs:
            if (img, i) not in seen:
                seen.add((img, i))
                f.write("crc %d %d %d %d %08x\n" % (img, i, h, w, crc))
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
