#!/usr/bin/python3
"""Writes the small .pt files tests/trainer/test_ptload.c reads. Needs Debian's python3-torch
(torch 1.13); run from this folder: /usr/bin/python3 make_pt_data.py. Values follow simple
formulas (exact in fp16 and fp32) that the C test recomputes; hostile files are hand-made
pickles inside valid zips."""
import collections
import io
import zipfile

import torch

torch.manual_seed(0)

# 1. A module: nn.Sequential(Conv2d(3, 4, 3), BatchNorm2d(4), SiLU()); value i of each float
#    tensor (row-major) is (i - 5) / 8 + 0.25 * k, k = its index in the state dict.
seq = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.SiLU())
with torch.no_grad():
    for k, (name, t) in enumerate(seq.state_dict().items()):
        if t.is_floating_point():
            t.copy_(((torch.arange(t.numel(), dtype=torch.float32) - 5) / 8 + 0.25 * k).view_as(t))
        else:
            t.fill_(7)
torch.save(seq, "seq_module.pt")
# The same module half, inside an ultralytics-like checkpoint dict.
torch.save({"epoch": 3, "model": seq.half(), "ema": None, "optimizer": None}, "seq_ckpt.pt")

# 2. A plain state dict with dtypes, views and shared storages.
base = torch.arange(6, dtype=torch.float32).view(2, 3)
sd = collections.OrderedDict()
sd["half"] = (torch.arange(12, dtype=torch.float32).view(3, 4) / 4).half()
sd["transposed"] = base.t()  # stride (1, 3): not contiguous
sd["strided"] = torch.arange(10, dtype=torch.float32)[2:8:2]  # offset 2, stride 2
sd["shared"] = base  # same storage as "transposed"
sd["long"] = torch.tensor([-3, 0, 1 << 40], dtype=torch.int64)
sd["special"] = torch.tensor([float("inf"), float("-inf"), 2.0**-24, -0.0, 65504.0, 2.0**-14],
                             dtype=torch.float16)
sd["bf16"] = torch.tensor([1.5, -2.25, 3.0e38], dtype=torch.bfloat16)
sd["double"] = torch.tensor([0.1, -1e300], dtype=torch.float64)
sd["scalar"] = torch.tensor(5, dtype=torch.int64)
torch.save(sd, "state_dict.pt")

# The same archive re-written with DEFLATE entries.
with zipfile.ZipFile("state_dict.pt") as zin, \
        zipfile.ZipFile("state_dict_deflate.pt", "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        zout.writestr(info.filename, zin.read(info.filename))


# 3. Hostile pickles in valid zips.
def archive(name, pkl, extra=()):
    with zipfile.ZipFile(name, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/version", b"3\n")
        for n, b in extra:
            z.writestr(n, b)


# A GLOBAL of os.system called through REDUCE: must stay an inert placeholder.
archive("evil_system.pt", b"\x80\x02}q\x00X\x03\x00\x00\x00cmdcos\nsystem\nX\x15\x00\x00\x00"
        b"touch /tmp/ptload_pwn\x85R\x73.")
# An unknown opcode (0xff) after PROTO.
archive("bad_opcode.pt", b"\x80\x02}\xff.")
# 5000 nested MARKs (the limit is 4096).
archive("mark_bomb.pt", b"\x80\x02" + b"(" * 5000 + b"N.")
# A string claiming 4 GiB.
archive("huge_string.pt", b"\x80\x02X\xff\xff\xff\xffabc.")
# 2000 nested dicts {'a': {'a': ...}}: legal for the machine; the walk must stop at its depth.
archive("deep_dicts.pt", b"\x80\x02" + b"}X\x01\x00\x00\x00a" * 2000 + b"}" + b"s" * 2000 + b".")
# A tensor whose storage entry is missing.
tensor = (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n"
          b"FloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00K\x04\x85K\x01\x85"
          b"\x89ccollections\nOrderedDict\n)Rt")
archive("missing_storage.pt", b"\x80\x02}X\x01\x00\x00\x00w" + tensor + b"Rs.")
# A tensor view larger than its storage (4 floats, size 5).
archive("view_overflow.pt", b"\x80\x02}X\x01\x00\x00\x00w" +
        tensor.replace(b"K\x04\x85K\x01\x85", b"K\x05\x85K\x01\x85") + b"Rs.",
        [("archive/data/0", b"\0" * 16)])
# The same tensor, well-formed, for comparison (value bits 1.0, 2.0, 3.0, 4.0).
import struct
archive("good_tensor.pt", b"\x80\x02}X\x01\x00\x00\x00w" + tensor + b"Rs.",
        [("archive/data/0", struct.pack("<4f", 1, 2, 3, 4))])
