#!/usr/bin/env python3
"""How long a GPU read_batch holds its caller (submitting) against how long it takes, by size:
one hot shard of an MoE checkpoint read whole and in parts, and all its shards at once.
    python3 bench/probes/submit_probe.py [folder of *.safetensors]
"""
import glob, os, sys, time
import ferry, numpy as np, torch
files = sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/root/ferry-tmp/moe/*", "*.safetensors")))
sizes = [os.path.getsize(p) for p in files]
buf = torch.empty(sum(sizes), dtype=torch.uint8, device="cuda")


def once(tag, pieces_of):
    hs = [ferry.File(p) for p in files]
    pieces = pieces_of(hs)
    t0 = time.perf_counter(); fut = ferry.read_batch(pieces); t1 = time.perf_counter()
    fut.result(); torch.cuda.synchronize(); t2 = time.perf_counter()
    n = sum(p[2].numel() for p in pieces)
    print("%-26s %7.1f MB  submit %6.1f ms  total %6.1f ms" % (tag, n / 1e6, (t1 - t0) * 1e3, (t2 - t0) * 1e3), flush=True)
    for f in hs:
        f.close()


def shards(hs):
    at, out = 0, []
    for f, n in zip(hs, sizes):
        out.append((f, 0, buf[at:at + n])); at += n
    return out


for mb in (8, 64, 256):
    for _ in range(2):
        once("one shard, first %d MB" % mb, lambda hs: [(hs[0], 0, buf[:mb << 20])])
for _ in range(2):
    once("one shard whole", lambda hs: shards(hs)[:1])
for _ in range(2):
    once("all shards", shards)
for _ in range(2):
    t0 = time.perf_counter(); a = ferry.fromfile(files[0], dtype=np.uint8, device="cuda"); torch.cuda.synchronize()
    print("fromfile one shard          total %6.1f ms" % ((time.perf_counter() - t0) * 1e3), flush=True)
