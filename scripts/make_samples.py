#!/usr/bin/env python3
"""Writes ferry's demo data: a raw file, a big-endian .npy and a safetensors file of many
tensors. Usage: make_samples.py DIR [RAW_MIB]"""
import json
import os
import struct
import sys

import numpy as np


def main() -> None:
    out = sys.argv[1]
    raw_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)

    raw = rng.standard_normal(raw_mib * (1 << 20) // 4, dtype=np.float32)
    raw.tofile(os.path.join(out, "sample.f32"))

    # Big-endian float32 matrix, as some Fortran and Java tools write them.
    be = rng.standard_normal((2048, 4096), dtype=np.float32).astype(">f4")
    np.save(os.path.join(out, "sample_be.npy"), be)

    # 300 tensors of mixed dtypes and shapes, laid out as the safetensors format requires.
    tensors = {}
    dtypes = [("F32", np.float32), ("F16", np.float16), ("I64", np.int64), ("U8", np.uint8)]
    for i in range(300):
        name, dt = dtypes[i % len(dtypes)]
        shape = (int(rng.integers(1, 256)), int(rng.integers(1, 1024)))
        tensors[f"layer.{i:03d}.weight"] = (name, (rng.standard_normal(shape) * 100).astype(dt))
    header, offset, blobs = {"__metadata__": {"source": "ferry demo"}}, 0, []
    for key in sorted(tensors):
        name, arr = tensors[key]
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[key] = {"dtype": name, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "sample.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for blob in blobs:
            fh.write(blob)


if __name__ == "__main__":
    main()
