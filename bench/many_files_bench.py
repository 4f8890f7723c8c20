#!/usr/bin/env python3
"""Many small files into host memory: ferry.load_many against numpy, per file.

Writes (once, reused) --files .npy files of --min-bytes to --max-bytes each (sizes spread
evenly, dtypes float32, float64, int16, uint8, float16 and int64 in turn, some big-endian,
some Fortran order). Then, the page cache hot, the readers taking turns for --rounds rounds,
best of each, every result checked against np.load:

  np.load loop         [np.load(p) for p in paths]
  np.load 16 threads   a 16-thread pool's map of np.load
  ferry.load loop      [ferry.load(p) for p in paths]
  ferry.load_many      ferry.load_many(paths)
  ferry.iter_load      list(ferry.iter_load(paths, prefetch=64))

Prints files/s and GB/s (payload and header bytes, 1e9) for each, and each one's ratio to the
np.load loop and to the 16-thread pool.

With --device cuda the arrays go to GPU memory, and the readers are (every result checked
against np.load's values in C order and native bytes, as GPU arrays hold them):

  DataLoader           a PyTorch DataLoader: 8 worker processes (persistent) running np.load,
                       batches of 64, pin_memory=True, each tensor moved with .to("cuda")
  ferry.load loop      [ferry.load(p, device="cuda") for p in paths] (CuPy arrays)
  load_many cupy       ferry.load_many(paths, device="cuda")
  load_many torch      ferry.load_many(paths, like=a CUDA tensor)

  python3 bench/many_files_bench.py --dir /tmp/ferry-many-files --files 20000
  python3 bench/many_files_bench.py --dir /tmp/ferry-many-files --files 20000 --device cuda
"""

import argparse
import concurrent.futures
import json
import os
import sys
import time

import numpy as np

DTYPES = ["<f4", "<f8", "<i2", "|u1", ">f2", "<i8", ">f4"]


def prepare(root, n, lo, hi):
    folder = os.path.join(root, "npy-%d-%d-%d" % (n, lo, hi))
    marker = os.path.join(folder, ".complete")
    paths = [os.path.join(folder, "f%06d.npy" % i) for i in range(n)]
    if os.path.exists(marker):
        return paths
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i, p in enumerate(paths):
        dt = np.dtype(DTYPES[i % len(DTYPES)])
        nbytes = lo + (hi - lo) * i // max(1, n - 1)
        items = max(1, nbytes // dt.itemsize)
        a = rng.integers(0, 100, items).astype(dt)
        if i % 5 == 0 and items % 8 == 0:
            a = np.asfortranarray(a.reshape(8, items // 8))
        np.save(p, a)
    open(marker, "w").close()
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/ferry-many-files")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--min-bytes", type=int, default=16 << 10)
    ap.add_argument("--max-bytes", type=int, default=256 << 10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    import ferry

    paths = prepare(a.dir, a.files, a.min_bytes, a.max_bytes)
    total = sum(os.path.getsize(p) for p in paths)
    for p in paths:  # hot
        with open(p, "rb") as f:
            f.read()
    if a.device == "cuda":
        return run_gpu(a, paths, total)
    pool = concurrent.futures.ThreadPoolExecutor(16)
    readers = {
        "np.load loop": lambda: [np.load(p) for p in paths],
        "np.load 16 threads": lambda: list(pool.map(np.load, paths)),
        "ferry.load loop": lambda: [ferry.load(p) for p in paths],
        "ferry.load_many": lambda: ferry.load_many(paths),
        "ferry.iter_load": lambda: list(ferry.iter_load(paths, prefetch=64)),
    }
    want = [np.load(p) for p in paths[:: max(1, len(paths) // 200)]]
    best = {}
    for _ in range(a.rounds):
        for name, fn in readers.items():
            t0 = time.perf_counter()
            got = fn()
            t = time.perf_counter() - t0
            if len(got) != len(paths):
                raise SystemExit("%s returned %d arrays of %d" % (name, len(got), len(paths)))
            for g, w in zip(got[:: max(1, len(paths) // 200)], want):
                if g.dtype != w.dtype or not np.array_equal(g, w):
                    raise SystemExit("%s returned another array" % name)
            del got
            best[name] = min(best.get(name, t), t)
        print("round done", file=sys.stderr, flush=True)
    report(a, paths, total, best, "np.load loop", "np.load 16 threads")


def report(a, paths, total, best, base_name, pooled_name):
    base, pooled = best[base_name], best[pooled_name]
    print("%d files, %.1f MB, %d CPUs, %s" % (len(paths), total / 1e6, os.cpu_count(), a.device))
    print("| reader | seconds | files/s | GB/s | vs %s | vs %s |" % (base_name, pooled_name))
    print("| --- | --- | --- | --- | --- | --- |")
    for name, t in best.items():
        print("| %s | %.3f | %.0f | %.2f | %.2fx | %.2fx |" % (name, t, len(paths) / t, total / t / 1e9,
                                                              base / t, pooled / t))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"files": len(paths), "bytes": total, "seconds": best}, f, indent=1)


class _NpyFiles:
    """The DataLoader's dataset: np.load in the worker, native bytes for torch."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torch

        a = np.load(self.paths[i])
        return torch.from_numpy(np.ascontiguousarray(a, a.dtype.newbyteorder("=")))


def run_gpu(a, paths, total):
    import cupy
    import torch

    import ferry

    loader = torch.utils.data.DataLoader(_NpyFiles(paths), batch_size=64, num_workers=8,
                                         pin_memory=True, persistent_workers=True,
                                         collate_fn=lambda batch: batch)

    def dataloader():
        out = []
        for batch in loader:
            out.extend(t.to("cuda", non_blocking=True) for t in batch)
        torch.cuda.synchronize()
        return out

    def cupy_done(xs):
        cupy.cuda.runtime.deviceSynchronize()
        return xs

    like = torch.empty(0, device="cuda")
    readers = {
        "DataLoader": dataloader,
        "ferry.load loop": lambda: cupy_done([ferry.load(p, device="cuda") for p in paths]),
        "load_many cupy": lambda: cupy_done(ferry.load_many(paths, device="cuda")),
        "load_many torch": lambda: cupy_done(ferry.load_many(paths, like=like)),
    }
    step = max(1, len(paths) // 200)
    want = [np.ascontiguousarray(np.load(p)) for p in paths[::step]]
    best = {}
    for _ in range(a.rounds):
        for name, fn in readers.items():
            t0 = time.perf_counter()
            got = fn()
            t = time.perf_counter() - t0
            if len(got) != len(paths):
                raise SystemExit("%s returned %d arrays of %d" % (name, len(got), len(paths)))
            for g, w in zip(got[::step], want):
                h = g.get() if hasattr(g, "get") else g.cpu().numpy()
                if h.shape != w.shape or not np.array_equal(h, w):
                    raise SystemExit("%s returned another array" % name)
            del got
            best[name] = min(best.get(name, t), t)
        print("round done", file=sys.stderr, flush=True)
    report(a, paths, total, best, "DataLoader", "ferry.load loop")


if __name__ == "__main__":
    main()
