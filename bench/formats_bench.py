#!/usr/bin/env python3
"""The formats' performance bars, measured with `ferry load --json` on files in the page cache:
  - safetensors of 1,000 tensors vs the same bytes as one raw file (bar: >= 0.85x)
  - big-endian .npy (byte swap on the GPU) vs the native-endian .npy of the same size (>= 0.9x)
Usage: formats_bench.py FERRY_BINARY DIR [GiB, default 4] [--json OUT]"""
import json
import os
import statistics
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import write_repeated  # noqa: E402


def load(ferry, path, runs=5, extra=()):
    """Median GB/s and the io paths of `ferry load --json` (the load itself, timed in process)."""
    rates, last = [], None
    for _ in range(runs):
        out = subprocess.run([ferry, "load", path, "--json", *extra], check=True, capture_output=True, text=True)
        last = json.loads(out.stdout)
        rates.append(last["gbps"])
    return statistics.median(rates), last


def main():
    ferry, out_dir = sys.argv[1], sys.argv[2]
    gib = int(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else 4
    os.makedirs(out_dir, exist_ok=True)
    total = gib << 30
    rng = np.random.default_rng(1)
    block = rng.standard_normal((64 << 20) // 4, dtype=np.float32).tobytes()

    # safetensors: 1,000 float32 tensors of slightly different sizes, tiling `total` bytes.
    n = 1000
    each = total // n // 4 * 4
    sizes = [each] * n
    sizes[-1] += total - sum(sizes)
    header, off = {}, 0
    for i, sz in enumerate(sizes):
        header[f"t{i:04d}"] = {"dtype": "F32", "shape": [sz // 4], "data_offsets": [off, off + sz]}
        off += sz
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    st = os.path.join(out_dir, "bench.safetensors")
    write_repeated(st, struct.pack("<Q", len(text)) + text, total, block)
    raw = os.path.join(out_dir, "bench.raw")
    write_repeated(raw, b"", total, block)

    # .npy: the same float32 values, native (little) and big-endian, each `total` bytes.
    count = total // 4
    def npy_header(descr):
        d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, count)
        pad = 64 - (10 + len(d) + 1) % 64
        d = d + " " * pad + "\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()
    le = os.path.join(out_dir, "bench_le.npy")
    be = os.path.join(out_dir, "bench_be.npy")
    write_repeated(le, npy_header("<f4"), total, block)
    swapped = np.frombuffer(block, dtype="<f4").astype(">f4").tobytes()
    write_repeated(be, npy_header(">f4"), total, swapped)

    for p in (st, raw, le, be):  # into the page cache
        with open(p, "rb") as fh:
            while fh.read(256 << 20):
                pass

    r_raw, j_raw = load(ferry, raw)
    r_st, j_st = load(ferry, st)
    r_le, j_le = load(ferry, le)
    r_be, j_be = load(ferry, be)
    rows = [
        ("raw file (same bytes)", r_raw, j_raw["io"]),
        (f"safetensors, {n} tensors", r_st, j_st["io"]),
        ("npy little-endian", r_le, j_le["io"]),
        ("npy big-endian (swap on %s)" % ("CPU" if j_be["device"] == "host" else "GPU"), r_be, j_be["io"]),
    ]
    print(f"formats bench: {gib} GiB each, device {j_raw['device']}, median of 5 `ferry load --json`")
    print(f"{'file':34s} {'GB/s':>8s}  bytes by path")
    for name, rate, io in rows:
        paths = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in io.items() if k != "fallbacks" and v >= 2**20)
        print(f"{name:34s} {rate:8.2f}  {paths}")
    ratio_st, ratio_be = r_st / r_raw, r_be / r_le
    def verdict(ratio, bar):
        return f"{ratio:.3f} (bar {bar:.2f}: {'met' if ratio >= bar else 'MISSED'})"
    print(f"safetensors / raw: {verdict(ratio_st, 0.85)}   big-endian / native npy: {verdict(ratio_be, 0.90)}")
    if j_be["device"] == "host":
        print("note: the bars are set for GPU memory; in host memory the byte swap is a CPU pass over the data")
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as fh:
            json.dump({"gib": gib, "rows": [{"name": a, "gbps": b, "io": c} for a, b, c in rows],
                       "safetensors_vs_raw": ratio_st, "bigendian_vs_native": ratio_be,
                       "bars_met": {"safetensors_vs_raw": ratio_st >= 0.85,
                                    "bigendian_vs_native": ratio_be >= 0.90}}, fh, indent=2)
    for p in (st, raw, le, be):
        os.unlink(p)


if __name__ == "__main__":
    main()
