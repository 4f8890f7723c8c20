#!/usr/bin/env python3
"""Where ferry.fromfile from Python loses against the CLI on one hot file, on the GPU machine.

  python3 bench/probes/destination_probe.py FILE build/tools/ferry [all|cupy-only]

In one process (CuPy and, unless cupy-only, PyTorch imported): fromfile with CuPy's pool
emptied before each call (fresh memory), with the pool kept (reused memory), into out= a fresh
array and then the same one again, the routes ferry took; then `ferry load --json` in child
processes, and fromfile without the stream lanes (staged). GB/s per call.
"""
import sys, time, json, subprocess, os
import numpy as np
path, cli = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "all"
import cupy
if mode != "cupy-only":
    import torch
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
cupy.zeros(1).sum(); cupy.cuda.Device().synchronize()
import ferry
n = os.path.getsize(path)
pool = cupy.get_default_memory_pool()
def sync(): cupy.cuda.Device().synchronize()
def clock(fn):
    sync(); t0 = time.perf_counter(); r = fn(); sync(); return r, time.perf_counter() - t0
def gb(d): return "%.2f GB/s (%.1f ms)" % (n / d / 1e9, d * 1e3)
# warm the engine
ferry.fromfile(path, np.uint8, count=4096, device="cuda")
for i in range(3):
    pool.free_all_blocks()
    a, d = clock(lambda: ferry.fromfile(path, np.float32, device="cuda")); del a
    print(mode, "fresh fromfile  #%d" % i, gb(d), flush=True)
for i in range(3):
    a, d = clock(lambda: ferry.fromfile(path, np.float32, device="cuda")); del a
    print(mode, "pooled fromfile #%d" % i, gb(d), flush=True)
pool.free_all_blocks()
for i in range(2):
    pool.free_all_blocks()
    out, da = clock(lambda: cupy.empty(n // 4, dtype=np.float32))
    _, d1 = clock(lambda: ferry.fromfile(path, np.float32, out=out))
    _, d2 = clock(lambda: ferry.fromfile(path, np.float32, out=out))
    print(mode, "cupy.empty %.1f ms; out= fresh %s; out= reused %s" % (da * 1e3, gb(d1), gb(d2)), flush=True)
    del out
pool.free_all_blocks()
print(mode, "routes", json.dumps(ferry.stats().get("routes")), flush=True)
if mode == "all":
    for i in range(3):
        j = json.loads(subprocess.run([cli, "load", path, "--json", "--dtype", "float32"], capture_output=True, text=True).stdout)
        print("cli #%d" % i, gb(j["seconds"]), json.dumps(j.get("io", {}).get("routes")), flush=True)
    with ferry.settings(lane_threshold="off"):
        for i in range(2):
            pool.free_all_blocks()
            a, d = clock(lambda: ferry.fromfile(path, np.float32, device="cuda")); del a
            print(mode, "staged fresh #%d" % i, gb(d), flush=True)
