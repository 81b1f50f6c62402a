#!/usr/bin/python3
"""Write tests/trainer/data_amp/amp_net_bf16.bin: one training forward + backward of the AMP test
net (tests/trainer/data_amp/amp_net.yaml: Conv(3->8, k3 s2) + BN + SiLU, Conv(8->16, k3 s2) + BN +
SiLU, Detect 1x1 conv 16->18 with bias) under torch.autocast('cpu', dtype=torch.bfloat16), as
trainer/model/net.c's AUTOCAST runs it: each conv inside autocast (its input and weights cast to bf16,
bf16 output), its output widened with .float(), BN (training mode, eps 1e-3, momentum 0.03) and
SiLU in float32 outside autocast, the Detect output permuted to (bs, na, ny, nx, no). The loss is
sum(out * dout) for a fixed random dout, so the backward starts from dout.

Run with Debian's python3-torch (1.13, CPU):  /usr/bin/python3 tests/trainer/make_amp_refs.py

FORMAT (little-endian): magic b"AMPREF1\\0", u32 count, then per record: name (64 bytes, NUL
padded), u32 numel, numel float32. Records: the parameters and buffers by ultralytics' state-dict
names (weights drawn from torch.manual_seed(0), BN weight / bias moved off 1 / 0), "input"
(2, 3, 16, 16), "dout" and "out" (2, 3, 4, 4, 6), "grad.input", "grad.<parameter>", and
"after.<running stat>" (the BN running statistics after the forward).
"""
import struct
import sys

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/trainer/data_amp/amp_net_bf16.bin"
BS, IMG, NA, NO = 2, 16, 3, 6


def main():
    torch.manual_seed(0)
    p = {}
    for i, (c1, c2) in enumerate([(3, 8), (8, 16)]):
        p[f"model.{i}.conv.weight"] = (torch.rand(c2, c1, 3, 3) * 2 - 1) / (c1 * 9) ** 0.5
        p[f"model.{i}.bn.weight"] = 1 + 0.4 * (torch.rand(c2) - 0.5)
        p[f"model.{i}.bn.bias"] = 0.4 * (torch.rand(c2) - 0.5)
    p["model.2.m.0.weight"] = (torch.rand(NA * NO, 16, 1, 1) * 2 - 1) / 4
    p["model.2.m.0.bias"] = torch.rand(NA * NO) * 2 - 1
    buf = {}
    for i, c2 in enumerate([8, 16]):
        buf[f"model.{i}.bn.running_mean"] = torch.zeros(c2)
        buf[f"model.{i}.bn.running_var"] = torch.ones(c2)
    x = torch.rand(BS, 3, IMG, IMG)
    dout = torch.rand(BS, NA, IMG // 4, IMG // 4, NO) * 2 - 1

    params = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    xin = x.clone().requires_grad_(True)
    run = {k: v.clone() for k, v in buf.items()}
    a = xin
    for i in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.conv2d(a, params[f"model.{i}.conv.weight"], None, 2, 1)
        assert y.dtype == torch.bfloat16
        y = y.float()
        y = F.batch_norm(y, run[f"model.{i}.bn.running_mean"], run[f"model.{i}.bn.running_var"],
                         params[f"model.{i}.bn.weight"], params[f"model.{i}.bn.bias"],
                         training=True, momentum=0.03, eps=1e-3)
        a = F.silu(y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = F.conv2d(a, params["model.2.m.0.weight"], params["model.2.m.0.bias"])
    assert r.dtype == torch.bfloat16
    r = r.float()
    ny = nx = IMG // 4
    out = r.view(BS, NA, NO, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
    (out * dout).sum().backward()

    rec = [(k, v) for k, v in p.items()] + [(k, v) for k, v in buf.items()]
    rec += [("input", x), ("dout", dout), ("out", out.detach()), ("grad.input", xin.grad)]
    rec += [("grad." + k, v.grad) for k, v in params.items()]
    rec += [("after." + k, v) for k, v in run.items()]
    with open(OUT, "wb") as f:
        f.write(b"AMPREF1\0" + struct.pack("<I", len(rec)))
        for name, t in rec:
            t = t.detach().contiguous().float().reshape(-1)
            f.write(name.encode().ljust(64, b"\0") + struct.pack("<I", t.numel()))
            f.write(struct.pack(f"<{t.numel()}f", *t.tolist()))
    print(f"wrote {OUT}: {len(rec)} records, torch {torch.__version__}")


if __name__ == "__main__":
    main()
