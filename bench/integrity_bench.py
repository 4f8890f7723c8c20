#!/usr/bin/env python3
"""What checksums cost: saves with and without them, hot loads with verification on and off,
and `ferry verify`, on the same checkpoint in the same run.

Makes a checkpoint of --tensors float32/bfloat16 tensors totalling --size in 6 shards
(ferry.save_checkpoint), then, readers taking turns for --rounds rounds (best of each), the page
cache hot:

  save    ferry.save_checkpoint with checksums vs checksums=False          bar >= 0.95x
  load    ferry.load_checkpoint(verify="always") vs verify="never"         bar >= 0.95x
  load1   ferry.load of one shard, verify always vs never                  (reported)
  verify  ferry.verify(dir) (Python) and `ferry verify --json dir` (CLI): GB/s of bytes hashed

--device cuda keeps the tensors on the GPU (saves hash them there; loads land and are checked
there); cpu keeps them in host memory.

  python3 bench/integrity_bench.py --dir /tmp/ib --size 1G --device cpu
  python3 bench/integrity_bench.py --dir /root/ib --size 4.5G --tensors 600 --device cuda

Prints a table, then one JSON object (also written to --json).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import human, parse_size, warm  # noqa: E402


def make_tensors(size, count, device):
    import numpy as np
    rng = np.random.default_rng(0)
    per = max(1, size // count // 4)
    block = rng.standard_normal(per, dtype=np.float32)
    out = {}
    for i in range(count):
        a = block.copy()
        a[0] = i  # every tensor differs
        out["layers.%04d.weight" % i] = a
    if device == "cuda":
        import torch
        out = {k: torch.from_numpy(v).cuda() for k, v in out.items()}
        torch.cuda.synchronize()
    return out


def best(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def sync(device):
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--tensors", type=int, default=512)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "build", "tools", "ferry"))
    ap.add_argument("--json")
    a = ap.parse_args()
    import ferry
    size = parse_size(a.size)
    tensors = make_tensors(size, a.tensors, a.device)
    nbytes = sum(int(t.nbytes) for t in tensors.values())
    shard = nbytes // 6 + 1
    on, off = os.path.join(a.dir, "with"), os.path.join(a.dir, "without")
    for d in (on, off):
        shutil.rmtree(d, ignore_errors=True)
    like = "torch" if a.device == "cuda" else None
    res = {"device": a.device, "bytes": nbytes, "tensors": a.tensors, "rounds": a.rounds}

    # Saves, taking turns, the first of each pair alternating (a save's writeback can still
    # occupy the disk when the next one starts): with checksums and without.
    t_on, t_off = [], []
    for r in range(a.rounds):
        pair = [(t_on, lambda: ferry.save_checkpoint(on, tensors, shard)),
                (t_off, lambda: ferry.save_checkpoint(off, tensors, shard, checksums=False))]
        for times, fn in (pair if r % 2 == 0 else pair[::-1]):
            times.append(best(fn, 1))
    res["save_checksums_gbps"] = nbytes / min(t_on) / 1e9
    res["save_plain_gbps"] = nbytes / min(t_off) / 1e9
    # What the hash alone costs: every tensor's chunk checksums where it lies (one GPU launch
    # for GPU tensors, host threads for host ones), the save's share of the work.
    from ferry import _ferry
    views = list(tensors.values())
    t_hash = best(lambda: _ferry.crc32c_chunks(views, 64 << 20), a.rounds)
    res["hash_gbps"] = nbytes / t_hash / 1e9
    del tensors

    files = [os.path.join(on, f) for f in sorted(os.listdir(on))]
    warm(files)

    def load(verify):
        out = ferry.load_checkpoint(on, device=a.device, like=like, verify=verify)
        sync(a.device)
        return out

    load("never")
    t_never, t_always = [], []
    for _ in range(a.rounds):
        t_never.append(best(lambda: load("never"), 1))
        t_always.append(best(lambda: load("always"), 1))
    res["load_never_gbps"] = nbytes / min(t_never) / 1e9
    res["load_always_gbps"] = nbytes / min(t_always) / 1e9

    one = [f for f in files if f.endswith(".safetensors")][0]
    one_bytes = os.path.getsize(one)
    t1n = best(lambda: ferry.load(one, device=a.device, like=like, verify="never"), a.rounds)
    t1a = best(lambda: ferry.load(one, device=a.device, like=like, verify="always"), a.rounds)
    res["load1_never_gbps"] = one_bytes / t1n / 1e9
    res["load1_always_gbps"] = one_bytes / t1a / 1e9

    rep = None
    t_py = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        rep = ferry.verify(on)
        t_py.append(time.perf_counter() - t0)
    assert rep["status"] == 0, rep
    res["verify_python_gbps"] = rep["bytes"] / min(t_py) / 1e9
    if os.path.exists(a.cli):
        cli = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            p = subprocess.run([a.cli, "verify", "--json", on], capture_output=True, text=True)
            cli.append(time.perf_counter() - t0)
            assert p.returncode == 0, p.stdout + p.stderr
        res["verify_cli_gbps"] = rep["bytes"] / min(cli) / 1e9
        res["verify_cli_own_gbps"] = json.loads(p.stdout)["gb_per_s"]

    rows = [
        ("save: checksums / plain (bar >= 0.95x)", res["save_checksums_gbps"], res["save_plain_gbps"]),
        ("load_checkpoint: always / never (bar >= 0.95x)", res["load_always_gbps"], res["load_never_gbps"]),
        ("load one shard: always / never", res["load1_always_gbps"], res["load1_never_gbps"]),
    ]
    print("integrity on %s: %s in %d tensors, best of %d" % (a.device, human(nbytes), a.tensors, a.rounds))
    for name, x, y in rows:
        print("  %-48s %7.2f / %7.2f GB/s  = %.3fx" % (name, x, y, x / y))
    print("  %-48s %7.2f GB/s" % ("the hash alone, where the tensors lie", res["hash_gbps"]))
    print("  %-48s %7.2f GB/s" % ("ferry.verify (Python)", res["verify_python_gbps"]))
    if "verify_cli_gbps" in res:
        print("  %-48s %7.2f GB/s (process included; its own timing %.2f)" % (
            "ferry verify (CLI)", res["verify_cli_gbps"], res["verify_cli_own_gbps"]))
    text = json.dumps(res)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
