#!/usr/bin/python3
"""Dump PyTorch's bf16 autocast convolutions (forward and backward) for tiny shapes.

Writes tests/kernels/data/lowp_refs.bin, read by tests/kernels/test_conv2d_lowp.c. Run with
Debian's python3-torch (`/usr/bin/python3 tests/kernels/make_lowp_refs.py`); the output is
committed, so the test needs no torch.

Each case runs F.conv2d under torch.autocast('cpu', dtype=torch.bfloat16) on float32 leaves
whose values are already bf16 (so autocast's input casts are exact), then backward with a bf16
upstream gradient. Autocast makes y bf16; x.grad, w.grad and b.grad are float32 tensors that
hold bf16 values (the backward of autocast's casts widens the bf16 gradients). Case "<name>_cl"
repeats a case with channels_last inputs (the values are stored NCHW all the same).

File layout (little-endian), as make_op_refs.py with another magic: b"KLPREF01", u32 version
(1), u32 tensor count; then per tensor: u16 name length, name (ASCII), u8 ndim, u32 dims[ndim],
float32 data (row-major, NCHW).
"""
import os
import struct

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "lowp_refs.bin")

# name: (x shape, w shape, stride, pad, bias, channels_last)
CASES = {
    "k3s1": ((2, 8, 9, 7), (6, 8, 3, 3), 1, 1, False, False),
    "k3s2b": ((2, 5, 9, 8), (7, 5, 3, 3), 2, 1, True, False),
    "k3s2b_cl": ((2, 5, 9, 8), (7, 5, 3, 3), 2, 1, True, True),
    "k1b": ((2, 16, 5, 6), (12, 16, 1, 1), 1, 0, True, False),
    "stem": ((1, 3, 14, 12), (4, 3, 6, 6), 2, 2, False, False),
}


def bf16_values(*shape, scale=1.0):
    return (torch.randn(*shape) * scale).to(torch.bfloat16).to(torch.float32)


def main():
    torch.manual_seed(2026)
    torch.set_num_threads(1)
    t = {}

    def put(name, v):
        t[name] = v.detach().to(torch.float32).contiguous().clone()

    for name, (xs, ws, s, p, bias, cl) in CASES.items():
        x = bf16_values(*xs)
        w = bf16_values(*ws, scale=0.3)
        b = bf16_values(ws[0]) if bias else None
        if cl:
            x = x.to(memory_format=torch.channels_last)
            w = w.to(memory_format=torch.channels_last)
        x.requires_grad_()
        w.requires_grad_()
        if b is not None:
            b.requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.conv2d(x, w, b, stride=s, padding=p)
        assert y.dtype == torch.bfloat16, y.dtype
        dy = torch.randn(*y.shape).to(torch.bfloat16)
        if cl:
            dy = dy.contiguous(memory_format=torch.channels_last)
        y.backward(dy)
        assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32
        put(name + ".x", x), put(name + ".w", w), put(name + ".y", y), put(name + ".dy", dy)
        put(name + ".dx", x.grad), put(name + ".dw", w.grad)
        if bias:
            put(name + ".b", b), put(name + ".db", b.grad)

    with open(OUT, "wb") as f:
        f.write(b"KLPREF01")
        f.write(struct.pack("<II", 1, len(t)))
        for name, v in t.items():
            nb = name.encode("ascii")
            f.write(struct.pack("<H", len(nb)) + nb + struct.pack("<B", v.dim()))
            f.write(struct.pack("<%dI" % v.dim(), *v.shape))
            f.write(v.numpy().astype("<f4").tobytes())
    print("wrote %s: %d tensors, %d bytes, torch %s" % (OUT, len(t), os.path.getsize(OUT),
                                                         torch.__version__))


if __name__ == "__main__":
    main()
