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

  DataLoader ...       a PyTorch DataLoader over a dataset whose items are np.load's arrays as
                       tensors, each tensor moved with .to("cuda", non_blocking=True): at its
                       defaults (no workers, batches of 1), in the configuration the issue
                       named (8 persistent workers, batches of 64, pin_memory=True), and the
                       best of a sweep (no workers, or 8 or 16, x batch size x prefetch_factor
                       x pin_memory) run first on up to --sweep-files of the files, one pass
                       each. The workers are started, outside the clock, before each timed
                       pass; ratios are to the fastest DataLoader row of the full run.
  ferry.load loop      [ferry.load(p, device="cuda") for p in paths] (CuPy arrays)
  load_many cupy       ferry.load_many(paths, device="cuda")
  load_many torch      ferry.load_many(paths, like=a CUDA tensor)

With --cold every reader starts with none of the files in the page cache (dropped before it
runs, outside the clock, by bench_common.evict: drop_caches as root, else each file's
posix_fadvise(DONTNEED)), and the readers are the
baseline, --uring (the ferry_uring_files program the build makes from bench/uring_files.cpp:
statx, openat, read and close of every file through one io_uring at --depth files in flight),
ferry.load_many (16 reading threads; into GPU memory with --device cuda) and, into host
memory, a --depth-thread pool of np.load; ratios are to the baseline. The baseline also runs once hot, so
that the table shows what the eviction took away.

  python3 bench/many_files_bench.py --dir /tmp/ferry-many-files --files 20000
  python3 bench/many_files_bench.py --dir /tmp/ferry-many-files --files 20000 --device cuda
  python3 bench/many_files_bench.py --files 100000 --cold --uring build/bench/ferry_uring_files
"""

import argparse
import concurrent.futures
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import evict  # noqa: E402

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
    ap.add_argument("--cold", action="store_true", help="drop the files from the page cache before each reader")
    ap.add_argument("--uring", default="", help="the ferry_uring_files baseline (with --cold)")
    ap.add_argument("--depth", type=int, default=16, help="files in flight (with --cold)")
    ap.add_argument("--sweep-files", type=int, default=5000,
                    help="files the DataLoader's configurations are swept on (with --device cuda)")
    a = ap.parse_args()
    import ferry

    paths = prepare(a.dir, a.files, a.min_bytes, a.max_bytes)
    total = sum(os.path.getsize(p) for p in paths)
    if a.cold:
        return run_cold(a, paths, total)
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


def run_cold(a, paths, total):
    import subprocess
    import tempfile

    import ferry

    if not a.uring or not os.access(a.uring, os.X_OK):
        raise SystemExit("--cold needs --uring: the ferry_uring_files program (bench/uring_files.cpp), "
                         "built by the build as bench/ferry_uring_files; got %r" % a.uring)
    with tempfile.NamedTemporaryFile("w", suffix=".list", delete=False) as f:
        f.write("\n".join(paths) + "\n")
        listing = f.name

    def uring():
        r = subprocess.run([a.uring, "--depth", str(a.depth), "--list", listing], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit("%s failed: %s" % (a.uring, r.stderr.strip()))
        out = json.loads(r.stdout)
        if out["files"] != len(paths) or out["bytes"] != total:
            raise SystemExit("%s read %d files, %d bytes, of %d, %d" % (a.uring, out["files"], out["bytes"],
                                                                     len(paths), total))
        return out["seconds"]

    sync = lambda: None  # noqa: E731
    many = lambda: ferry.load_many(paths)  # noqa: E731
    name = "ferry.load_many"
    if a.device == "cuda":
        import cupy
        sync = cupy.cuda.runtime.deviceSynchronize
        many = lambda: ferry.load_many(paths, device="cuda")  # noqa: E731
        name = "load_many cupy"
        cupy.zeros(1)
    def timed(fn):
        def run():
            t0 = time.perf_counter()
            got = fn()
            sync()
            t = time.perf_counter() - t0
            if len(got) != len(paths):
                raise SystemExit("a reader returned %d arrays of %d" % (len(got), len(paths)))
            return t
        return run

    base = "io_uring baseline, depth %d" % a.depth
    readers = {base: uring, name: timed(many)}
    if a.device == "cpu":
        pool = concurrent.futures.ThreadPoolExecutor(a.depth)
        readers["np.load %d threads" % a.depth] = timed(lambda: list(pool.map(np.load, paths)))
    best = {}
    method = ""
    try:
        for _ in range(a.rounds):
            for reader, fn in readers.items():
                method = evict(paths)
                t = fn()
                best[reader] = min(best.get(reader, t), t)
            print("round done", file=sys.stderr, flush=True)
        for p in paths:  # the baseline once hot, to show what the eviction took away
            with open(p, "rb") as f:
                f.read()
        best[base + " (hot)"] = min(uring() for _ in range(2))
    finally:
        os.unlink(listing)
    print("cold: each reader after every file was dropped from the page cache (%s)" % method)
    report(a, paths, total, best, base, name)


class _NpyFiles:
    """The DataLoader's dataset: np.load in the worker, native bytes for torch. ``n`` items of
    ``paths`` (set in the main process: the sampler's length; the workers keep every path)."""

    def __init__(self, paths):
        self.paths, self.n = paths, len(paths)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        a = np.load(self.paths[i])
        return torch.from_numpy(np.ascontiguousarray(a, a.dtype.newbyteorder("=")))


def _as_list(batch):
    return batch


class _Loader:
    """A DataLoader of one configuration over ``paths``, its workers started before the clock:
    a pass over one batch per worker first, then the dataset's length set to all the files."""

    def __init__(self, paths, workers, batch, prefetch=None, pin=False):
        import torch

        self.dataset = _NpyFiles(paths)
        kw = dict(num_workers=workers, batch_size=batch, pin_memory=pin, collate_fn=_as_list)
        if workers:
            kw.update(persistent_workers=True, prefetch_factor=prefetch)
        self.loader = torch.utils.data.DataLoader(self.dataset, **kw)
        self.name = "DataLoader (%s)" % ", ".join(
            ["%d workers" % workers, "batch %d" % batch]
            + (["prefetch_factor %d" % prefetch] if workers else []) + (["pin_memory"] if pin else []))

    def __call__(self):
        import torch

        out = []
        for batch in self.loader:
            out.extend(t.to("cuda", non_blocking=True) for t in batch)
        torch.cuda.synchronize()
        return out

    def warm(self, n):
        self.dataset.n = min(n, len(self.dataset.paths))
        for _ in self.loader:
            pass
        self.dataset.n = len(self.dataset.paths)


def _dataloader_best(paths, sweep_files):
    """The fastest DataLoader configuration on up to ``sweep_files`` of ``paths``, one pass each."""
    subset = paths[:sweep_files]
    results = []
    grid = [(0, batch, None, pin) for batch in (1, 256) for pin in (True, False)]
    grid += [(workers, batch, prefetch, pin) for workers in (8, 16) for batch in (32, 256)
             for prefetch in (2, 8) for pin in (True, False)]
    for workers, batch, prefetch, pin in grid:
        loader = _Loader(subset, workers, batch, prefetch, pin)
        loader.warm(workers * batch)
        t0 = time.perf_counter()
        got = loader()
        t = time.perf_counter() - t0
        if len(got) != len(subset):
            raise SystemExit("%s returned %d arrays of %d" % (loader.name, len(got), len(subset)))
        del got, loader
        results.append((t, workers, batch, prefetch, pin))
    results.sort(key=lambda r: r[0])
    print("DataLoader sweep on %d files (files/s): %s" % (len(subset), "; ".join(
        "%d w, b %d%s%s: %.0f" % (w, b, ", pf %d" % pf if pf else "", ", pin" if pin else "", len(subset) / t)
        for t, w, b, pf, pin in results)), file=sys.stderr, flush=True)
    return results[0][1:]


def run_gpu(a, paths, total):
    import cupy
    import torch

    import ferry

    workers, batch, prefetch, pin = _dataloader_best(paths, a.sweep_files)
    loaders = [_Loader(paths, 0, 1), _Loader(paths, 8, 64, 2, True)]
    swept = _Loader(paths, workers, batch, prefetch, pin)
    if swept.name not in [l.name for l in loaders]:
        loaders.append(swept)
    names = [l.name.replace("DataLoader (", "DataLoader, best of the sweep (") if l is swept else l.name
             for l in loaders]

    def cupy_done(xs):
        cupy.cuda.runtime.deviceSynchronize()
        return xs

    like = torch.empty(0, device="cuda")
    readers = dict(zip(names, loaders))
    readers.update({
        "ferry.load loop": lambda: cupy_done([ferry.load(p, device="cuda") for p in paths]),
        "load_many cupy": lambda: cupy_done(ferry.load_many(paths, device="cuda")),
        "load_many torch": lambda: cupy_done(ferry.load_many(paths, like=like)),
    })
    step = max(1, len(paths) // 200)
    want = [np.ascontiguousarray(np.load(p)) for p in paths[::step]]
    best = {}
    for _ in range(a.rounds):
        for name, fn in readers.items():
            if isinstance(fn, _Loader):
                fn.warm(fn.loader.num_workers * fn.loader.batch_size)
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
            if name.startswith("load_many"):  # where the call's time went
                from ferry import _many_device
                print("%s %.3f s: %s" % (name, t, "  ".join(
                    "%s %s" % (k, ("%.3f" % v) if isinstance(v, float) else v)
                    for k, v in _many_device.last_call.items())), file=sys.stderr, flush=True)
        print("round done", file=sys.stderr, flush=True)
    # Ratios to the fastest DataLoader of the full run, whichever configuration it was.
    fastest = min(names, key=lambda n: best[n])
    best = {(n + ", the fastest" if n == fastest else n): t for n, t in best.items()}
    report(a, paths, total, best, fastest + ", the fastest", "ferry.load loop")


if __name__ == "__main__":
    main()
