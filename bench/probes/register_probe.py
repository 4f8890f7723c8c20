#!/usr/bin/env python3
"""Copies of a hot file to the GPU from the file's own page-cache pages, registered once, against
copies from a pinned allocation of the same size (the copy ceiling). The mechanism of
ferry.register_file, measured without ferry: the file is mapped read-only and registered with
cudaHostRegister(cudaHostRegisterReadOnly), whole and then in 1 GiB pieces, and copied with
cudaMemcpyAsync, in one copy and in 64 MiB copies. Needs CuPy and a GPU; prints GB/s, best of 3.

    python3 bench/probes/register_probe.py FILE          # FILE hot in the page cache (cat FILE >/dev/null)
"""
import argparse
import mmap
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import cupy as cp
    rt = cp.cuda.runtime
    size = os.path.getsize(a.file)
    dev = cp.cuda.alloc(size)
    stream = cp.cuda.Stream(non_blocking=True)
    read_only = 8  # cudaHostRegisterReadOnly

    def copy(ptr, label, chunk=0):
        best = float("inf")
        for _ in range(a.repeat):
            stream.synchronize()
            t = time.perf_counter()
            for off in range(0, size, chunk or size):
                rt.memcpyAsync(dev.ptr + off, ptr + off, min(chunk or size, size - off), 1, stream.ptr)
            stream.synchronize()
            best = min(best, time.perf_counter() - t)
        print("%-52s %6.2f GB/s" % (label, size / best / 1e9), flush=True)

    pinned = cp.cuda.alloc_pinned_memory(size)
    np.frombuffer(pinned, dtype=np.uint8, count=size)[:] = 1
    copy(pinned.ptr, "pinned allocation -> device, one copy")
    copy(pinned.ptr, "pinned allocation -> device, 64 MiB copies", 64 << 20)
    del pinned

    fd = os.open(a.file, os.O_RDONLY)
    mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    ptr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    t = time.perf_counter()
    rt.hostRegister(ptr, size, read_only)
    print("registered whole (%.1f GiB): %.3f s" % (size / 2**30, time.perf_counter() - t), flush=True)
    copy(ptr, "registered page cache -> device, one copy")
    copy(ptr, "registered page cache -> device, 64 MiB copies", 64 << 20)
    t = time.perf_counter()
    rt.hostUnregister(ptr)
    print("unregistered: %.3f s" % (time.perf_counter() - t))
    piece = 1 << 30
    t = time.perf_counter()
    for off in range(0, size, piece):
        rt.hostRegister(ptr + off, min(piece, size - off), read_only)
    print("registered in 1 GiB pieces: %.3f s" % (time.perf_counter() - t), flush=True)
    copy(ptr, "registered in pieces -> device, 64 MiB copies", 64 << 20)
    for off in range(0, size, piece):
        rt.hostUnregister(ptr + off)


if __name__ == "__main__":
    main()
