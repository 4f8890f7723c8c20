#!/usr/bin/env python3
"""ferry from Python against what Python users call today, in one process, files in the page
cache:

  fromfile   ferry.fromfile(path, float32, device="cuda")  vs  cupy.fromfile(path, float32)
  load       ferry.load(st, device="cuda", like="torch")   vs  safetensors.torch.load_file(st, device="cuda")

Bars (docs/benchmarks.md): fromfile >= 10x cupy.fromfile (8 GiB); load >= 5x safetensors
(4 GiB). Prints a table, then one JSON object (also written to --json). A missing GPU, CuPy,
PyTorch or safetensors turns the affected rows into "skipped" with the reason.

  python3 python/bench/bench_python.py --dir /root/ferry-tmp --size 8G --st-size 4G
"""

import argparse
import json
import os
import sys
import time

# The repository's shared bench helpers (bench/bench_common.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_common import parse_size, try_import  # noqa: E402


def warm_page_cache(path):
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(64 << 20)
        while f.readinto(buf):
            pass


def make_raw(path, size, np):
    block = np.frombuffer(os.urandom(64 << 20), dtype=np.uint8)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, block.nbytes)
            f.write(block[:n].tobytes())
            left -= n


def make_safetensors(path, size, np, ferry):
    """float16 tensors of 32 MiB plus a few small float32 ones, like a model checkpoint."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal(16 << 20).astype(np.float16)  # 32 MiB
    tensors = {}
    total, i = 0, 0
    while total + base.nbytes <= size:
        tensors["layers.%04d.weight" % i] = base.reshape(4096, 4096)
        total += base.nbytes
        i += 1
    for j in range(8):
        tensors["norms.%d" % j] = rng.standard_normal(4096).astype(np.float32)
    ferry.save(path, tensors, {"format": "pt"})


def best_of(repeat, fn, sync):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
        del out
    return min(times), times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="where to create the files")
    ap.add_argument("--size", default="8G", help="raw file size for fromfile (default 8G)")
    ap.add_argument("--st-size", default="4G", help="safetensors file size for load (default 4G)")
    ap.add_argument("--file", help="use this raw file instead of creating one")
    ap.add_argument("--st-file", help="use this safetensors file instead of creating one")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the JSON result here")
    ap.add_argument("--keep", action="store_true", help="keep the files this run created")
    args = ap.parse_args()

    import numpy as np
    import ferry

    result = {"ferry": ferry.__version__, "settings": ferry.settings.resolved(), "rows": []}
    rows = result["rows"]
    created = []
    gpus = ferry.cuda_device_count()
    if gpus == 0:
        reason = "no usable GPU: " + ferry.cuda_unavailable_reason()
        rows.append({"test": "fromfile", "skipped": reason})
        rows.append({"test": "load", "skipped": reason})
        return report(result, args)
    cupy, cupy_err = try_import("cupy")
    torch, torch_err = try_import("torch")
    if torch is not None and not torch.cuda.is_available():
        torch, torch_err = None, "torch: no CUDA"
    st_torch, st_err = try_import("safetensors.torch")

    try:
        # ---- fromfile ----
        raw = args.file
        if raw is None:
            raw = os.path.join(args.dir, "ferry-bench-python.bin")
            make_raw(raw, parse_size(args.size), np)
            created.append(raw)
        size = os.path.getsize(raw)
        warm_page_cache(raw)
        ferry.fromfile(raw, np.float32, count=1 << 20, device="cuda", like="ferry")  # CUDA context, staging buffers
        ferry.reset_stats()
        row = {"test": "fromfile", "file": raw, "bytes": size}
        if cupy is not None:
            cupy.zeros(1)
            pool = cupy.get_default_memory_pool()

            def sync():
                cupy.cuda.runtime.deviceSynchronize()
                pool.free_all_blocks()

            t_ferry, all_ferry = best_of(args.repeat, lambda: ferry.fromfile(raw, np.float32, device="cuda"), sync)
            t_base, all_base = best_of(args.repeat, lambda: cupy.fromfile(raw, dtype=np.float32), sync)
            row.update(ferry_s=t_ferry, ferry_runs=all_ferry, baseline="cupy.fromfile",
                       baseline_s=t_base, baseline_runs=all_base, speedup=t_base / t_ferry, bar=10.0)
        else:
            t_ferry, all_ferry = best_of(
                args.repeat, lambda: ferry.fromfile(raw, np.float32, device="cuda", like="ferry"), lambda: None)
            row.update(ferry_s=t_ferry, ferry_runs=all_ferry, baseline="cupy.fromfile",
                       skipped_baseline=cupy_err)
        row["ferry_gbps"] = size / row["ferry_s"] / 1e9
        if "baseline_s" in row:
            row["baseline_gbps"] = size / row["baseline_s"] / 1e9
        row["paths"] = {k: v["bytes"] for k, v in ferry.stats()["read"].items()}
        rows.append(row)

        # ---- load safetensors into torch ----
        if torch is None:
            rows.append({"test": "load", "skipped": torch_err})
        else:
            st = args.st_file
            if st is None:
                st = os.path.join(args.dir, "ferry-bench-python.safetensors")
                make_safetensors(st, parse_size(args.st_size), np, ferry)
                created.append(st)
            size = os.path.getsize(st)
            warm_page_cache(st)
            torch.zeros(1, device="cuda")
            ferry.load(st, device="cuda", like="torch", names=["norms.0"])
            ferry.reset_stats()

            def sync():
                torch.cuda.synchronize()

            row = {"test": "load", "file": st, "bytes": size}
            t_ferry, all_ferry = best_of(args.repeat, lambda: ferry.load(st, device="cuda", like="torch"), sync)
            row.update(ferry_s=t_ferry, ferry_runs=all_ferry, ferry_gbps=size / t_ferry / 1e9,
                       baseline="safetensors.torch.load_file(device='cuda')")
            row["paths"] = {k: v["bytes"] for k, v in ferry.stats()["read"].items()}
            if st_torch is not None:
                t_base, all_base = best_of(args.repeat, lambda: st_torch.load_file(st, device="cuda"), sync)
                row.update(baseline_s=t_base, baseline_runs=all_base, baseline_gbps=size / t_base / 1e9,
                           speedup=t_base / t_ferry, bar=5.0)
                # The same tensors, bit for bit.
                a, b = ferry.load(st, device="cuda", like="torch"), st_torch.load_file(st, device="cuda")
                row["identical"] = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
            else:
                row["skipped_baseline"] = st_err
            rows.append(row)
    finally:
        if not args.keep:
            for p in created:
                os.unlink(p)
    result["stats"] = ferry.stats()
    return report(result, args)


def report(result, args):
    print("%-9s %10s %10s %12s %10s %9s %5s" % ("test", "GiB", "ferry s", "baseline s", "ferry GB/s", "speedup", "bar"))
    ok = True
    for r in result["rows"]:
        if "skipped" in r:
            print("%-9s skipped: %s" % (r["test"], r["skipped"]))
            continue
        speed = r.get("speedup")
        passed = speed is not None and speed >= r["bar"]
        ok = ok and (speed is None or passed)
        print("%-9s %10.2f %10.3f %12s %10.1f %9s %5s" % (
            r["test"], r["bytes"] / (1 << 30), r["ferry_s"],
            "%.3f" % r["baseline_s"] if "baseline_s" in r else "n/a",
            r["ferry_gbps"], "%.1fx" % speed if speed else "n/a",
            ("ok" if passed else "MISS") if speed else "-"))
        if "skipped_baseline" in r:
            print("          baseline skipped: %s" % r["skipped_baseline"])
    result["bars_met"] = ok
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
