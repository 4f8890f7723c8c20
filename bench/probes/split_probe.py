#!/usr/bin/env python3
"""Whether a one-shot read of a hot file to the GPU gets closer to the copy ceiling when part of
the file skips the staging copy: the head read by ferry (staged through its pinned buffers, one
CPU copy per byte), the tail at the same time mapped read-only, registered piece by piece
(cudaHostRegisterReadOnly) on one thread and copied to the GPU straight from the page cache.
A registration costs a CPU much less per byte than a copy, so moving a fraction of the bytes
there leaves the staged side less to copy, if the driver lets the two run side by side.

Each thread count runs in a fresh process (ferry reads FERRY_THREADS once); inside it, every
fraction takes its turn once per round, and the best round of each is printed. Times: "data"
is when every byte is on the GPU, "all" also counts unregistering the tail. Needs ferry, CuPy
and a GPU.

    python3 bench/probes/split_probe.py FILE --fractions 0,0.1,0.2,0.3 --pieces 64M,256M --threads 16,14
"""
import argparse
import json
import mmap
import os
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from bench_common import parse_size  # noqa: E402

READ_ONLY = 8  # cudaHostRegisterReadOnly
HOST_TO_DEVICE = 1


def child(a):
    import cupy as cp
    import ferry
    rt = cp.cuda.runtime
    size = os.path.getsize(a.file)
    dst = cp.empty(size, dtype=cp.uint8)
    # The engine, its lanes and buffers made, the file hot, and every page of dst copied into once
    # (a fresh allocation takes its first copy about a tenth slower).
    ferry.fromfile(a.file, np.uint8, out=dst)
    stream = cp.cuda.Stream(non_blocking=True)
    fd = os.open(a.file, os.O_RDONLY)
    fractions = [float(f) for f in a.fractions.split(",")]
    pieces = [parse_size(p) for p in a.pieces.split(",")]
    cases = [(f, p) for f in fractions for p in (pieces if f > 0 else pieces[:1])]
    results = {}

    def one(fraction, piece):
        tail = int(size * fraction) // piece * piece
        head = size - tail
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ) if tail else None
        ptr = np.frombuffer(mm, dtype=np.uint8).ctypes.data if mm else 0
        done = {}
        registered = []

        def register_tail():
            t = time.perf_counter()
            off = size
            while off > head:
                off -= piece
                rt.hostRegister(ptr + off, piece, READ_ONLY)
                registered.append(off)
                rt.memcpyAsync(dst.data.ptr + off, ptr + off, piece, HOST_TO_DEVICE, stream.ptr)
            done["register"] = time.perf_counter() - t

        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        worker = threading.Thread(target=register_tail) if tail else None
        if worker:
            worker.start()
        if head:
            ferry.fromfile(a.file, np.uint8, count=head, out=dst[:head])
        t_head = time.perf_counter() - t0
        if worker:
            worker.join()
        stream.synchronize()
        cp.cuda.Device().synchronize()
        t_data = time.perf_counter() - t0
        for off in registered:
            rt.hostUnregister(ptr + off)
        t_all = time.perf_counter() - t0
        if mm:
            mm.close()
        return {"data": t_data, "all": t_all, "head": t_head, "register": done.get("register", 0.0),
                "tail_bytes": tail}

    ceiling = None
    if a.ceiling:
        pinned = cp.cuda.alloc_pinned_memory(size)
        np.frombuffer(pinned, dtype=np.uint8, count=size)[:] = 1
        ceiling = float("inf")
        for _ in range(3):
            stream.synchronize()
            t = time.perf_counter()
            rt.memcpyAsync(dst.data.ptr, pinned.ptr, size, HOST_TO_DEVICE, stream.ptr)
            stream.synchronize()
            ceiling = min(ceiling, time.perf_counter() - t)
        del pinned
    check = np.fromfile(a.file, dtype=np.uint8, count=1 << 20, offset=size - (1 << 20))
    for r in range(a.rounds):
        for case in (cases if r % 2 == 0 else cases[::-1]):
            res = one(*case)
            if not np.array_equal(cp.asnumpy(dst[size - (1 << 20):]), check):
                raise SystemExit("split_probe: the tail on the GPU differs from the file")
            key = "%g/%d" % case
            rounds = results.get(key, {}).get("rounds", []) + [round(res["data"] * 1e3, 2)]
            if key not in results or res["data"] < results[key]["data"]:
                results[key] = res
            results[key]["rounds"] = rounds
    os.close(fd)
    print(json.dumps({"size": size, "ceiling": ceiling, "results": results}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--fractions", default="0,0.1,0.2,0.3")
    ap.add_argument("--pieces", default="64M,256M")
    ap.add_argument("--threads", default="16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ceiling", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    print("| ferry threads | tail registered | piece | data on GPU | GB/s | with unregister | GB/s "
          "| head read | tail registered in | rounds (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ceilings = []
    for i, threads in enumerate(a.threads.split(",")):
        env = dict(os.environ, FERRY_THREADS=threads)
        cmd = [sys.executable, __file__, a.file, "--fractions", a.fractions, "--pieces", a.pieces,
               "--rounds", str(a.rounds), "--child"] + (["--ceiling"] if i == 0 else [])
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=600)
        rep = json.loads(out.stdout.strip().splitlines()[-1])
        size = rep["size"]
        if rep["ceiling"]:
            ceilings.append(size / rep["ceiling"] / 1e9)
        for key, r in rep["results"].items():
            frac, piece = key.split("/")
            print("| %s | %.0f%% | %s MiB | %.1f ms | %.2f | %.1f ms | %.2f | %.1f ms | %.1f ms | %s |" % (
                threads, 100 * r["tail_bytes"] / size, int(piece) >> 20, r["data"] * 1e3,
                size / r["data"] / 1e9, r["all"] * 1e3, size / r["all"] / 1e9, r["head"] * 1e3,
                r["register"] * 1e3, " ".join(str(x) for x in r["rounds"])), flush=True)
    for c in ceilings:
        print("\npinned host -> device copy (ceiling), best of 3: %.2f GB/s" % c)


if __name__ == "__main__":
    main()
