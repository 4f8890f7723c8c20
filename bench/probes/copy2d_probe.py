#!/usr/bin/env python3
"""Host-to-GPU copies of row segments: whether a 2-D copy (cudaMemcpy2DAsync from pinned
memory, rows `width` bytes, `pitch` apart) runs slower than a plain copy of the same bytes, and
what a copy of the whole span followed by a device-to-device 2-D gather gives instead. CuPy
only; 160 MiB of rows per width, best of 5.

    python3 bench/probes/copy2d_probe.py
"""
import time

import cupy as cp
from cupy.cuda import runtime as rt


def best_of(fn, stream, n=5):
    fn()
    stream.synchronize()
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        stream.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    for width, pitch in ((1536, 3072), (3072, 6144), (5376, 10752), (8192, 16384), (65536, 131072)):
        rows = max(1, (160 << 20) // width)
        host = cp.cuda.alloc_pinned_memory(rows * pitch)
        dev = cp.cuda.alloc(rows * width)
        span = cp.cuda.alloc(rows * pitch)
        s = cp.cuda.Stream(non_blocking=True)
        cases = {
            "2-D copy": lambda: rt.memcpy2DAsync(dev.ptr, width, host.ptr, pitch, width, rows,
                                                 rt.memcpyHostToDevice, s.ptr),
            "plain copy": lambda: rt.memcpyAsync(dev.ptr, host.ptr, rows * width, rt.memcpyHostToDevice, s.ptr),
            "span, then a device 2-D gather": lambda: (
                rt.memcpyAsync(span.ptr, host.ptr, rows * pitch, rt.memcpyHostToDevice, s.ptr),
                rt.memcpy2DAsync(dev.ptr, width, span.ptr, pitch, width, rows, rt.memcpyDeviceToDevice, s.ptr)),
        }
        out = ["%s %.2f GB/s" % (k, rows * width / best_of(fn, s) / 1e9) for k, fn in cases.items()]
        print("width %6d pitch %6d rows %7d: %s" % (width, pitch, rows, ", ".join(out)), flush=True)


if __name__ == "__main__":
    main()
