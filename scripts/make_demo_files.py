#!/usr/bin/env python3
"""Writes the demo's sample files with the Python standard library alone (the GPU machine may
have no numpy): a big-endian float32 .npy file and a safetensors file of many tensors of mixed
dtypes. `make demo` then loads them into GPU memory with `ferry load --checksum`.

Usage: make_demo_files.py OUT_DIR [--npy-mib 1024] [--tensors 1000] [--safetensors-mib 1024]
"""
import argparse
import json
import os
import struct


def fill(f, nbytes, seed, word="<I"):
    """Writes nbytes of cheap, deterministic, non-constant data (finite float values)."""
    block = bytearray(1 << 20)
    x = seed
    for i in range(0, len(block), 4):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        struct.pack_into(word, block, i, 0x3F000000 | (x & 0x007FFFFF))  # floats in [0.5, 1)
    block = bytes(block)
    left = nbytes
    while left:
        n = min(left, len(block))
        f.write(block[:n])
        left -= n


def npy_header(descr, shape):
    """The header numpy writes: version 1.0, padded so the data starts at a multiple of 64."""
    shape_text = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    d += " " * (21 - len(str(shape[0]))) if shape else ""
    hlen = len(d) + 1
    pad = 64 - (10 + hlen) % 64
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", hlen + pad) + d.encode() + b" " * pad + b"\n"


def write_npy(path, mib):
    count = mib * (1 << 20) // 4
    with open(path, "wb") as f:
        f.write(npy_header(">f4", [count]))
        fill(f, count * 4, 1, ">I")


def write_safetensors(path, tensors, mib):
    kinds = [("F32", 4), ("BF16", 2), ("F16", 2), ("I64", 8), ("U8", 1)]
    per = max(1, mib * (1 << 20) // tensors)
    entries = []
    for i in range(tensors):
        dt, size = kinds[i % len(kinds)]
        n = max(1, per // size)
        entries.append(("layer.%04d.%s" % (i, dt.lower()), dt, size, n))
    entries.sort(key=lambda e: (-e[2], e[0]))  # largest items first keeps every tensor aligned
    header, offset = {"__metadata__": {"source": "ferry demo"}}, 0
    for name, dt, size, n in entries:
        header[name] = {"dtype": dt, "shape": [n], "data_offsets": [offset, offset + n * size]}
        offset += n * size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        fill(f, offset, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--npy-mib", type=int, default=1024)
    p.add_argument("--tensors", type=int, default=1000)
    p.add_argument("--safetensors-mib", type=int, default=1024)
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    npy = os.path.join(a.out_dir, "big_endian.npy")
    st = os.path.join(a.out_dir, "many_tensors.safetensors")
    write_npy(npy, a.npy_mib)
    write_safetensors(st, a.tensors, a.safetensors_mib)
    print(npy)
    print(st)


if __name__ == "__main__":
    main()
