#!/usr/bin/env python3
"""What does opening a local ferry.File cost, from Python's main thread and from another
thread, and what do the opens add to one read_batch of many small files (opened inside the
clock, as bench/zarr_bench.py's raw read opens its chunk files)?
    python3 bench/probes/file_open_probe.py --dir DIR --files 4096 --size 16K --rounds 5
"""
import argparse
import os
import sys
import threading
import time

import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--dir", default="/tmp/ferry-file-open-probe")
ap.add_argument("--files", type=int, default=4096)
ap.add_argument("--size", default="16K", help="bytes of each file (K and M suffixes)")
ap.add_argument("--rounds", type=int, default=5)
a = ap.parse_args()
size = int(a.size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[a.size[-1].upper()] if a.size[-1].isalpha() else int(a.size)

import ferry  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_common as bc  # noqa: E402

os.makedirs(a.dir, exist_ok=True)
files = [os.path.join(a.dir, "f%06d" % i) for i in range(a.files)]
payload = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
for p in files:
    if not os.path.exists(p) or os.path.getsize(p) != size:
        with open(p, "wb") as f:
            f.write(payload)
for p in files:  # into the page cache
    with open(p, "rb") as f:
        f.read()


def opens():
    t = time.perf_counter()
    for p in files:
        ferry.File(p, "r").close()
    return (time.perf_counter() - t) / len(files) * 1e6


def read_all():
    buf = np.empty(size * len(files), np.uint8)
    t = time.perf_counter()
    bc.read_whole(ferry, files, [size] * len(files), buf)
    return (time.perf_counter() - t) * 1e3


main = [opens() for _ in range(a.rounds)]
other = []
th = threading.Thread(target=lambda: other.extend(opens() for _ in range(a.rounds)))
th.start()
th.join()
reads = [read_all() for _ in range(a.rounds)]
print("%d files of %d bytes, %d rounds" % (len(files), size, a.rounds))
print("| what | each round |")
print("| --- | --- |")
print("| open and close, main thread (us a file) | %s |" % " ".join("%.1f" % x for x in main))
print("| open and close, another thread (us a file) | %s |" % " ".join("%.1f" % x for x in other))
print("| read_batch of every file, opens inside the clock (ms) | %s |" % " ".join("%.1f" % x for x in reads))
sys.exit(0)
