#!/usr/bin/env python3
"""Writes .pt deflate bombs without torch (issue 44): a torch.save zip whose data.pkl is a plain
state dict and whose storages are DEFLATE entries of zeros.

  make_pt_bomb.py OUT.pt N_BOMBS [--view small|whole]

N_BOMBS storages each declare 2^28 float32 (1 GiB) and hold deflated zeros (about 1 MB each;
the stream is made once and reused). --view whole: each bomb's tensor views the whole storage;
small (the default): a 4-element view of it, as if a real tensor's storage were inflated to a
gigabyte. A real 4-element tensor "ok" is stored beside them. The pickle is protocol 2, written
by Python's pickler with stand-in classes named as torch's (nothing of torch is imported)."""
import collections
import pickle
import struct
import sys
import types
import zlib

NUMEL = 1 << 28


def stand_ins():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils

    class FloatStorage:
        pass

    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"
    torch.FloatStorage = FloatStorage

    def _rebuild_tensor_v2(*args):
        raise RuntimeError("never called")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    return FloatStorage, _rebuild_tensor_v2


FloatStorage, rebuild = stand_ins()


class Storage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class Tensor:
    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        return (rebuild, (self.storage, 0, self.shape, (1,), False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FloatStorage, obj.key, "cpu", obj.numel)
        return None


def zip_bytes(entries):
    """entries: (name, method, crc, usize, data). A plain zip (no zip64: every size < 4 GiB)."""
    out, central = bytearray(), bytearray()
    for name, method, crc, usize, data in entries:
        n = name.encode()
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), usize,
                           len(n), 0) + n + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc,
                               len(data), usize, len(n), 0, 0, 0, 0, 0, off) + n
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central),
                      len(out), 0)
    return bytes(out + central + end)


def main():
    out, n_bombs = sys.argv[1], int(sys.argv[2])
    whole = "--view" in sys.argv and sys.argv[sys.argv.index("--view") + 1] == "whole"
    sd = collections.OrderedDict()
    ok = Storage("ok", 4)
    sd["ok"] = Tensor(ok, (4,))
    for k in range(n_bombs):
        sd["bomb%d" % k] = Tensor(Storage("b%d" % k, NUMEL), (NUMEL if whole else 4,))
    f = __import__("io").BytesIO()
    Pickler(f, protocol=2).dump(sd)
    # the deflated zeros, made once: 1 GiB through zlib in 64 MiB steps
    z = zlib.compressobj(1, zlib.DEFLATED, -15)
    chunk, crc, parts = bytes(64 << 20), 0, []
    for _ in range((NUMEL * 4) // len(chunk)):
        parts.append(z.compress(chunk))
        crc = zlib.crc32(chunk, crc)
    parts.append(z.flush())
    bomb = b"".join(parts)
    okb = struct.pack("<4f", 1, 2, 3, 4)
    entries = [("archive/data.pkl", 0, zlib.crc32(f.getvalue()), len(f.getvalue()), f.getvalue()),
               ("archive/data/ok", 0, zlib.crc32(okb), len(okb), okb),
               ("archive/version", 0, zlib.crc32(b"3\n"), 2, b"3\n")]
    entries += [("archive/data/b%d" % k, 8, crc, NUMEL * 4, bomb) for k in range(n_bombs)]
    with open(out, "wb") as fo:
        fo.write(zip_bytes(entries))


if __name__ == "__main__":
    main()
