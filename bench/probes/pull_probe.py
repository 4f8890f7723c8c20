#!/usr/bin/env python3
"""Whether the GPU's own loads from pinned host memory (a kernel reading the mapped pages over
PCIe) move bytes to the GPU faster than the copy engine (cudaMemcpyAsync), and whether the two
side by side beat either. From one large pinned allocation (DRAM) and from a small one reused
(as staging buffers are, which the CPU caches may still hold). Needs CuPy and a GPU; prints
GB/s, best of --repeat.

    python3 bench/probes/pull_probe.py --size 8G
"""
import argparse
import time

import numpy as np

import os
import sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from bench_common import parse_size  # noqa: E402

KERNEL = r"""
extern "C" __global__ void pull(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                unsigned long long n, unsigned long long src_mask) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i & src_mask], b = src[(i + stride) & src_mask];
        uint4 c = src[(i + 2 * stride) & src_mask], d = src[(i + 3 * stride) & src_mask];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i & src_mask];
}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="8G")
    ap.add_argument("--small", default="64M", help="the reused pinned buffer")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import cupy as cp
    size = parse_size(a.size)
    small = parse_size(a.small)
    rt = cp.cuda.runtime
    kern = cp.RawKernel(KERNEL, "pull")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    dev = cp.cuda.alloc(size)
    cp.cuda.runtime.memset(dev.ptr, 0, size)
    big = cp.cuda.alloc_pinned_memory(size)
    np.frombuffer(big, dtype=np.uint8, count=size)[:] = 3
    little = cp.cuda.alloc_pinned_memory(small)
    np.frombuffer(little, dtype=np.uint8, count=small)[:] = 5
    s1 = cp.cuda.Stream(non_blocking=True)
    s2 = cp.cuda.Stream(non_blocking=True)

    def timed(fn):
        best = float("inf")
        for _ in range(a.repeat):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - t)
        return size / best / 1e9

    def engine(src_ptr, src_size, lo, hi, stream):
        off = lo
        while off < hi:
            n = min(src_size, hi - off)
            rt.memcpyAsync(dev.ptr + off, src_ptr + (0 if src_size < size else off), n, 1, stream.ptr)
            off += n

    def pull(src_ptr, src_size, lo, hi, stream, blocks, threads=512):
        n16 = (hi - lo) // 16
        mask = (src_size // 16 - 1) if src_size < size else (1 << 63) - 1
        base = src_ptr + (0 if src_size < size else lo)
        with stream:
            kern((blocks,), (threads,), (np.uint64(base), np.uint64(dev.ptr + lo), np.uint64(n16), np.uint64(mask)))

    rows = []
    for label, ptr, n in (("one pinned allocation of the whole size", big.ptr, size),
                          ("a %d MiB pinned buffer reused" % (small >> 20), little.ptr, small)):
        rows.append((label, "copy engine (cudaMemcpyAsync)", timed(lambda: engine(ptr, n, 0, size, s1))))
        for k in (1, 2, 4, 8):
            rows.append((label, "kernel loads, %d blocks x 512" % (k * sms),
                         timed(lambda: pull(ptr, n, 0, size, s1, k * sms))))
        for frac in (0.5, 0.25):
            cut = int(size * frac) // small * small

            def both():
                engine(ptr, n, 0, size - cut, s1)
                pull(ptr, n, size - cut, size, s2, 2 * sms)
            rows.append((label, "copy engine + kernel loads for %d%%" % (100 * frac), timed(both)))
    if np.frombuffer(big, dtype=np.uint8, count=16)[0] != 3:
        raise SystemExit("pinned memory changed")
    got = cp.asnumpy(cp.ndarray((16,), cp.uint8, dev + (size - 16)))
    if got[0] not in (3, 5):
        raise SystemExit("the copy did not land")
    print("| source | how | GB/s |")
    print("| --- | --- | --- |")
    for r in rows:
        print("| %s | %s | %.2f |" % r)


if __name__ == "__main__":
    main()
