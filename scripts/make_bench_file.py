#!/usr/bin/env python3
"""Writes PATH of SIZE (e.g. 8G, 512M) bytes of random data, fast: make_bench_file.py PATH SIZE"""
import os
import sys

path, size = sys.argv[1], sys.argv[2]
n = int(size[:-1]) << {"G": 30, "M": 20}[size[-1].upper()]
block = os.urandom(64 << 20)
with open(path, "wb") as fh:
    for off in range(0, n, len(block)):
        fh.write(block[: min(len(block), n - off)])
